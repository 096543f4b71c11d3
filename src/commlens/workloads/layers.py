"""The transformer layer shared by GPT, BERT and T5, tensor-parallel by heads.

Shapes are ``[s, b, h]`` (sequence first); under sequence parallelism the
residual stream between layers is ``[s/tp, b, h]``. Registration order is what
``commlens.job.models.param_shapes`` lists: ln1, attn, ln2, [cross, ln3], mlp.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from commlens.job.models import ModelConfig
from commlens.workloads.tp import (
    ColumnParallelLinear,
    RowParallelLinear,
    TPContext,
    mark,
)


def make_norm(cfg: ModelConfig, tp: TPContext, on_shard: bool = True) -> nn.Module:
    """LayerNorm (GPT, BERT) or bias-free RMSNorm (T5).

    ``on_shard``: the norm runs on the residual stream, which sequence
    parallelism splits, so its gradients are partial and summed over tp.
    """
    norm: nn.Module
    if cfg.arch == "t5":
        norm = nn.RMSNorm(cfg.hidden, eps=cfg.layernorm_eps)
    else:
        norm = nn.LayerNorm(cfg.hidden, eps=cfg.layernorm_eps)
    for p in norm.parameters():
        mark(p, seq_parallel=on_shard and tp.sequence_parallel)
    return norm


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, bias: torch.Tensor | None
) -> torch.Tensor:
    """q [b, n, sq, d], k/v [b, n, sk, d] -> [b, n, sq, d]; ``bias`` [1, n, sq, sk]."""
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    if causal:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v


class SelfAttention(nn.Module):
    """qkv column-parallel (whole heads per rank), projection row-parallel."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, causal: bool) -> None:
        super().__init__()
        bias = cfg.arch != "t5"
        self.heads = cfg.heads // tp.size  # heads on this rank
        self.head_dim = cfg.head_dim
        self.causal = causal
        self.qkv = ColumnParallelLinear(tp, cfg.hidden, 3 * cfg.hidden, bias=bias)
        self.proj = RowParallelLinear(tp, cfg.hidden, cfg.hidden, bias=bias)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        qkv = self.qkv(x)  # [s, b, 3·h/tp], packed [heads, 3, head_dim]
        s, b, _ = qkv.shape
        q, k, v = qkv.view(s, b, self.heads, 3, self.head_dim).permute(3, 1, 2, 0, 4)
        out = attention(q, k, v, self.causal, bias)  # [b, heads, s, d]
        out = out.permute(2, 0, 1, 3).reshape(s, b, self.heads * self.head_dim)
        return self.proj(out)  # [s(/tp), b, h]: all-reduce (or reduce-scatter) over tp


class CrossAttention(nn.Module):
    """T5 decoder attention over the encoder output; q and kv column-parallel."""

    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        self.heads = cfg.heads // tp.size
        self.head_dim = cfg.head_dim
        self.q = ColumnParallelLinear(tp, cfg.hidden, cfg.hidden, bias=False)
        self.kv = ColumnParallelLinear(tp, cfg.hidden, 2 * cfg.hidden, bias=False)
        self.proj = RowParallelLinear(tp, cfg.hidden, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        q = self.q(x)  # [sq, b, h/tp]
        kv = self.kv(memory)  # [sk, b, 2·h/tp], packed [heads, 2, head_dim]
        sq, b, _ = q.shape
        sk = kv.shape[0]
        q = q.view(sq, b, self.heads, self.head_dim).permute(1, 2, 0, 3)
        k, v = kv.view(sk, b, self.heads, 2, self.head_dim).permute(3, 1, 2, 0, 4)
        out = attention(q, k, v, causal=False, bias=None)
        return self.proj(out.permute(2, 0, 1, 3).reshape(sq, b, -1))


class MLP(nn.Module):
    """fc1 column-parallel, GELU (ReLU for T5), fc2 row-parallel."""

    def __init__(self, cfg: ModelConfig, tp: TPContext) -> None:
        super().__init__()
        bias = cfg.arch != "t5"
        self.fc1 = ColumnParallelLinear(tp, cfg.hidden, cfg.ffn_hidden, bias=bias)
        self.fc2 = RowParallelLinear(tp, cfg.ffn_hidden, cfg.hidden, bias=bias)
        self.act = F.relu if cfg.arch == "t5" else F.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))  # [s(/tp), b, h] -> [s, b, f/tp] -> [s(/tp), b, h]


class Block(nn.Module):
    """One layer: pre-norm (GPT, T5) or post-norm (BERT), optional cross-attention.

    ``recompute`` (set by ``apply_recompute``) drops the layer's activations
    and reruns its forward, collectives included, during backward.
    """

    def __init__(self, cfg: ModelConfig, tp: TPContext, *, causal: bool, cross: bool = False):
        super().__init__()
        self.post_norm = cfg.arch == "bert"
        self.recompute = False
        self.ln1 = make_norm(cfg, tp)
        self.attn = SelfAttention(cfg, tp, causal)
        self.ln2 = make_norm(cfg, tp)
        self.cross = CrossAttention(cfg, tp) if cross else None
        self.ln3 = make_norm(cfg, tp) if cross else None
        self.mlp = MLP(cfg, tp)
        self.tp = tp

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, memory: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            out: torch.Tensor = checkpoint(self._forward, x, bias, memory, use_reentrant=False)
            return out
        return self._forward(x, bias, memory)

    def _forward(
        self, x: torch.Tensor, bias: torch.Tensor | None, memory: torch.Tensor | None
    ) -> torch.Tensor:
        if self.post_norm:  # BERT
            x = self.ln1(x + self.attn(x, bias))
            return self.ln2(x + self.mlp(x))
        x = x + self.attn(self.ln1(x), bias)
        if self.cross is not None and self.ln3 is not None:
            assert memory is not None
            x = x + self.cross(self.ln2(x), memory)
            return x + self.mlp(self.ln3(x))
        return x + self.mlp(self.ln2(x))
