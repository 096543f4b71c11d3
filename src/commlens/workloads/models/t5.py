"""T5 (v1.0): encoder-decoder, relative position bias, one shared word embedding.

    enc_tokens [b, s] ─ embed ─ encoder blocks (bidirectional, RMSNorm, ReLU) ─ memory
    dec_tokens [b, s] ─ embed ─ decoder blocks (causal self-attention,
        cross-attention over memory) ─ ln_f ─ · h^-½ ─ logits = x · Wordᵀ [s, b, V/tp]
      └ vocab-parallel cross entropy against labels

Each stack has its own relative-position bias table [buckets, heads/tp],
shared by its layers; tensor parallelism splits it by heads. Encoder and
decoder run the same sequence length. Pipeline parallelism is not provided.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from commlens.job.models import ModelConfig, flops_per_step, param_count
from commlens.workloads.layers import Block, make_norm
from commlens.workloads.models.gpt import sum_embeddings
from commlens.workloads.tp import (
    TPContext,
    VocabParallelEmbedding,
    enter_column,
    mark,
    vocab_parallel_cross_entropy,
)


def relative_buckets(
    length: int, bidirectional: bool, buckets: int, max_distance: int, device: torch.device
) -> torch.Tensor:
    """[q, k] bucket of each relative distance k − q (T5's log-spaced buckets)."""
    pos = torch.arange(length, device=device)
    rel = pos.unsqueeze(0) - pos.unsqueeze(1)  # memory − query
    out = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        out += (rel > 0).long() * buckets
        n = rel.abs()
    else:
        n = -torch.clamp(rel, max=0)
    exact = buckets // 2
    far = (
        exact
        + (
            torch.log(n.float().clamp(min=1) / exact)
            / math.log(max_distance / exact)
            * (buckets - exact)
        ).long()
    )
    far = torch.clamp(far, max=buckets - 1)
    return out + torch.where(n < exact, n, far)


class T5Stack(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPContext, layers: int, decoder: bool) -> None:
        super().__init__()
        self.cfg, self.tp, self.decoder = cfg, tp, decoder
        self.rel_bias = nn.Embedding(cfg.rel_buckets, cfg.heads // tp.size)  # [buckets, heads/tp]
        mark(self.rel_bias.weight, tp_dim=1)
        self.blocks = nn.ModuleDict(
            {str(i): Block(cfg, tp, causal=decoder, cross=decoder) for i in range(layers)}
        )
        self.ln_f = make_norm(cfg, tp)

    def position_bias(self, length: int, device: torch.device) -> torch.Tensor:
        b = relative_buckets(
            length, not self.decoder, self.cfg.rel_buckets, self.cfg.rel_max_distance, device
        )
        return self.rel_bias(b).permute(2, 0, 1).unsqueeze(0)  # [1, heads/tp, s, s]

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        full = x.shape[0] * (self.tp.size if self.tp.sequence_parallel else 1)
        bias = self.position_bias(full, x.device)
        for block in self.blocks.values():
            x = block(x, bias, memory)
        return self.ln_f(x)  # [s(/tp), b, h]


class T5Embedding(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        self.tp = tp
        self.word = VocabParallelEmbedding(tp, cfg.vocab, cfg.hidden)  # [V/tp, h]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return sum_embeddings(self.word(tokens.t()), self.tp)  # [s(/tp), b, h]


class T5(nn.Module):
    """One rank's T5, split ``tp`` ways."""

    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        self.cfg, self.tp = cfg, tp
        self.first = self.last = True
        self.embed = T5Embedding(cfg, tp)
        self.encoder = T5Stack(cfg, tp, cfg.layers, decoder=False)
        self.decoder = T5Stack(cfg, tp, cfg.decoder_layers, decoder=True)

    def forward(
        self, batch: dict[str, torch.Tensor], hidden: torch.Tensor | None = None
    ) -> torch.Tensor:
        memory = self.encoder(self.embed(batch["enc_tokens"]))  # [s(/tp), b, h]
        x = self.decoder(self.embed(batch["dec_tokens"]), memory)  # [s(/tp), b, h]
        x = enter_column(x * self.cfg.hidden**-0.5, self.tp)  # [s, b, h]
        logits = F.linear(x, self.embed.word.weight)  # [s, b, V/tp]
        labels = batch["labels"].t()
        return vocab_parallel_cross_entropy(logits.flatten(0, 1), labels.flatten(), self.tp)

    @staticmethod
    def num_params(cfg: ModelConfig) -> int:
        """V·h + L_e·(4h² + 2hf + 2h) + L_d·(8h² + 2hf + 3h) + 2·(buckets·heads + h)."""
        return param_count(cfg)

    @staticmethod
    def flops(cfg: ModelConfig, seq_len: int, batch: int, recompute: bool = False) -> float:
        return flops_per_step(cfg, seq_len, batch, 1, recompute)
