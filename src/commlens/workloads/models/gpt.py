"""GPT: a decoder-only transformer with a tied LM head (Megatron / GPT-NeoX style).

    tokens [b, s] ─ embed (vocab-parallel word + learned positions) ─ [s(/tp), b, h]
      └ blocks: pre-LN causal attention + GELU MLP ─ [s(/tp), b, h]
        └ ln_f ─ logits = x · Wordᵀ [s, b, V/tp] ─ vocab-parallel cross entropy

A pipeline stage holds a contiguous run of blocks; the first stage the
embedding, the last ln_f and (if not also first) ``lm_head``, its copy of the
tied word embedding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from commlens.job.models import ModelConfig, flops_per_step, param_count, stage_layers
from commlens.workloads.layers import Block, make_norm
from commlens.workloads.tp import (
    TPContext,
    VocabParallelEmbedding,
    enter_column,
    mark,
    reduce_from_tp,
    reduce_scatter_seq,
    vocab_parallel_cross_entropy,
)


def seq_positions(s: int, tp: TPContext, device: torch.device) -> torch.Tensor:
    """Positions of this rank's part of the sequence (all of it without SP)."""
    if not tp.sequence_parallel:
        return torch.arange(s, device=device)
    n = s // tp.size
    return torch.arange(tp.rank * n, (tp.rank + 1) * n, device=device)


def sum_embeddings(partial: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Sum the vocab-parallel partial embeddings: all-reduce, or reduce-scatter under SP."""
    return reduce_scatter_seq(partial, tp) if tp.sequence_parallel else reduce_from_tp(partial, tp)


class GPTEmbedding(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        self.tp = tp
        self.word = VocabParallelEmbedding(tp, cfg.vocab, cfg.hidden)  # [V/tp, h]
        self.pos = nn.Embedding(cfg.max_positions, cfg.hidden)  # [P, h]
        mark(self.pos.weight, seq_parallel=tp.sequence_parallel)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.t()  # [s, b]
        x = sum_embeddings(self.word(t), self.tp)  # [s(/tp), b, h]: all-reduce over tp
        return x + self.pos(seq_positions(t.shape[0], self.tp, t.device)).unsqueeze(1)


class GPT(nn.Module):
    """One rank's GPT: layers of pipeline ``stage`` of ``pp``, split ``tp`` ways."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, pp: int = 1, stage: int = 0) -> None:
        super().__init__()
        self.cfg, self.tp = cfg, tp
        self.first, self.last = stage == 0, stage == pp - 1
        if self.first:
            self.embed = GPTEmbedding(cfg, tp)
        self.blocks = nn.ModuleDict(
            {str(i): Block(cfg, tp, causal=True) for i in stage_layers(cfg.layers, pp, stage)}
        )
        if self.last:
            self.ln_f = make_norm(cfg, tp)
            if not self.first:  # the last stage's copy of the tied embedding
                self.lm_head = VocabParallelEmbedding(tp, cfg.vocab, cfg.hidden)

    def word_embedding(self) -> nn.Parameter:
        """The (tied) word embedding this stage uses."""
        return self.embed.word.weight if self.first else self.lm_head.weight

    def forward(
        self, batch: dict[str, torch.Tensor], hidden: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.embed(batch["tokens"]) if self.first else hidden  # [s(/tp), b, h]
        assert x is not None
        for block in self.blocks.values():
            x = block(x)
        if not self.last:
            return x  # sent to the next stage
        x = enter_column(self.ln_f(x), self.tp)  # [s, b, h]; SP: all-gather
        logits = F.linear(x, self.word_embedding())  # [s, b, V/tp]
        labels = batch["labels"].t()  # [s, b]
        return vocab_parallel_cross_entropy(logits.flatten(0, 1), labels.flatten(), self.tp)

    @staticmethod
    def num_params(cfg: ModelConfig) -> int:
        """Whole-model parameters, closed form: 12·L·h² + 13·L·h + (V + P)·h + 2·h."""
        return param_count(cfg)

    @staticmethod
    def flops(cfg: ModelConfig, seq_len: int, batch: int, recompute: bool = False) -> float:
        """Training FLOPs for ``batch`` sequences (conventions §2)."""
        return flops_per_step(cfg, seq_len, batch, 1, recompute)
