"""BERT: an encoder with a masked-language-model head tied to the word embedding.

    tokens, types [b, s] ─ embed (vocab-parallel word + positions + types, LayerNorm)
      └ blocks: post-LN bidirectional attention + GELU MLP ─ [s(/tp), b, h]
        └ masked positions [b·m, h] ─ mlm: dense, GELU, LayerNorm
          └ logits = x · Wordᵀ + bias [b·m, V/tp] ─ vocab-parallel cross entropy

No pooler or next-sentence head (as RoBERTa). Every sequence masks the same
number of positions, so each micro-batch's mean loss weighs tokens equally.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from commlens.job.models import ModelConfig, flops_per_step, param_count, stage_layers
from commlens.workloads.layers import Block, make_norm
from commlens.workloads.models.gpt import seq_positions, sum_embeddings
from commlens.workloads.tp import (
    TPContext,
    VocabParallelEmbedding,
    copy_to_tp,
    gather_seq,
    mark,
    vocab_parallel_cross_entropy,
)


class BertEmbedding(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        self.tp = tp
        self.word = VocabParallelEmbedding(tp, cfg.vocab, cfg.hidden)  # [V/tp, h]
        self.pos = nn.Embedding(cfg.max_positions, cfg.hidden)  # [P, h]
        self.token_type = nn.Embedding(cfg.type_vocab, cfg.hidden)  # [T, h]
        self.ln = make_norm(cfg, tp)
        for p in (self.pos.weight, self.token_type.weight):
            mark(p, seq_parallel=tp.sequence_parallel)

    def forward(self, tokens: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        t = tokens.t()  # [s, b]
        x = sum_embeddings(self.word(t), self.tp)  # [s(/tp), b, h]: all-reduce over tp
        pos = seq_positions(t.shape[0], self.tp, t.device)
        x = x + self.pos(pos).unsqueeze(1) + self.token_type(types.t()[pos])
        return self.ln(x)


class MLMHead(nn.Module):
    """dense + GELU + LayerNorm (replicated over tp), then the tied, vocab-parallel decoder."""

    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.ln = make_norm(cfg, tp, on_shard=False)
        self.bias = nn.Parameter(torch.empty(cfg.vocab // tp.size))  # [V/tp]
        mark(self.bias, tp_dim=0)
        self.tp = tp

    def forward(self, x: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
        x = self.ln(F.gelu(self.dense(x)))  # [N, h]
        x = copy_to_tp(x, self.tp)  # backward: all-reduce of the partial gradients
        return F.linear(x, word, self.bias)  # [N, V/tp]


class BERT(nn.Module):
    """One rank's BERT: layers of pipeline ``stage`` of ``pp``, split ``tp`` ways."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, pp: int = 1, stage: int = 0) -> None:
        super().__init__()
        self.cfg, self.tp = cfg, tp
        self.first, self.last = stage == 0, stage == pp - 1
        if self.first:
            self.embed = BertEmbedding(cfg, tp)
        self.blocks = nn.ModuleDict(
            {str(i): Block(cfg, tp, causal=False) for i in stage_layers(cfg.layers, pp, stage)}
        )
        if self.last:
            self.mlm = MLMHead(cfg, tp)
            if not self.first:  # the last stage's copy of the tied embedding
                self.lm_head = VocabParallelEmbedding(tp, cfg.vocab, cfg.hidden)

    def word_embedding(self) -> nn.Parameter:
        return self.embed.word.weight if self.first else self.lm_head.weight

    def forward(
        self, batch: dict[str, torch.Tensor], hidden: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.embed(batch["tokens"], batch["types"]) if self.first else hidden
        assert x is not None
        for block in self.blocks.values():
            x = block(x)
        if not self.last:
            return x  # [s(/tp), b, h], sent to the next stage
        if self.tp.sequence_parallel:
            # the head is replicated over tp, so its input gradient is complete: split, not reduce
            x = gather_seq(x, self.tp, reduce_grad=False)
        where = batch["mask_pos"]  # [b, m] masked positions
        rows = torch.arange(where.shape[0], device=where.device).unsqueeze(1)
        picked = x.transpose(0, 1)[rows, where].flatten(0, 1)  # [b·m, h]
        logits = self.mlm(picked, self.word_embedding())
        return vocab_parallel_cross_entropy(logits, batch["mask_labels"].flatten(), self.tp)

    @staticmethod
    def num_params(cfg: ModelConfig) -> int:
        """Whole-model parameters: (V + P + T)·h + L·(12h² + 13h) + h² + 5h + V."""
        return param_count(cfg)

    @staticmethod
    def flops(cfg: ModelConfig, seq_len: int, batch: int, recompute: bool = False) -> float:
        return flops_per_step(cfg, seq_len, batch, 1, recompute)
