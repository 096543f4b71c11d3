"""Megatron-style tensor parallelism with explicit, visible collectives.

Every collective here is a plain ``torch.distributed`` call inside an
autograd Function, so capture sees forward and backward traffic alike
(DTensor's functional collectives would hide the backward ones). Tensors are
laid out ``[s, b, h]`` (sequence first), so sequence parallelism splits and
gathers along dim 0, which is contiguous.

Per transformer layer and micro-batch, without sequence parallelism: the two
row-parallel outputs (attention projection, MLP fc2) are all-reduced in
forward, and the two column-parallel inputs (qkv, fc1) have their gradients
all-reduced in backward: 4 all-reduces of s·b·h elements. With sequence
parallelism each becomes an all-gather plus a reduce-scatter of the same size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed import ProcessGroup


@dataclass(frozen=True)
class TPContext:
    """This rank's tensor-parallel group (size 1 and no group: no communication)."""

    size: int = 1
    rank: int = 0
    group: ProcessGroup | None = None
    sequence_parallel: bool = False

    @property
    def active(self) -> bool:
        return self.size > 1


def mark(param: torch.Tensor, tp_dim: int | None = None, seq_parallel: bool = False) -> None:
    """Tag a parameter: ``tp_dim`` is the dim split over tp ranks (None: replicated);
    ``seq_parallel`` marks a replicated one whose gradient is partial under
    sequence parallelism and must be summed over the tp group after backward."""
    param.tp_dim = tp_dim  # type: ignore[attr-defined]
    param.sequence_parallel = seq_parallel  # type: ignore[attr-defined]


# --- the four communication primitives (forward / backward pairs) ---------------


def _all_reduce(x: torch.Tensor, ctx: TPContext) -> torch.Tensor:
    x = x.contiguous()
    dist.all_reduce(x, group=ctx.group)
    return x


def _all_gather(x: torch.Tensor, ctx: TPContext) -> torch.Tensor:
    out = x.new_empty((x.shape[0] * ctx.size, *x.shape[1:]))
    dist.all_gather_single(out, x.contiguous(), group=ctx.group)
    return out


def _reduce_scatter(x: torch.Tensor, ctx: TPContext) -> torch.Tensor:
    out = x.new_empty((x.shape[0] // ctx.size, *x.shape[1:]))
    dist.reduce_scatter_single(out, x.contiguous(), group=ctx.group)
    return out


def _chunk(x: torch.Tensor, ctx: TPContext) -> torch.Tensor:
    n = x.shape[0] // ctx.size
    return x[ctx.rank * n : (ctx.rank + 1) * n].contiguous()


class _CopyToTP(torch.autograd.Function):
    """Forward identity; backward all-reduce (sums the partial input gradients)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: TPContext) -> torch.Tensor:
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_reduce(grad, ctx.tp), None


class _ReduceFromTP(torch.autograd.Function):
    """Forward all-reduce (sums partial outputs); backward identity."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: TPContext) -> torch.Tensor:
        return _all_reduce(x, tp)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _GatherSeq(torch.autograd.Function):
    """Forward all-gather along the sequence; backward reduce-scatter (or a plain
    split when the consumer is replicated and its gradient already complete)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: TPContext, reduce_grad: bool) -> torch.Tensor:
        ctx.tp, ctx.reduce_grad = tp, reduce_grad
        return _all_gather(x, tp)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        if ctx.reduce_grad:
            return _reduce_scatter(grad, ctx.tp), None, None
        return _chunk(grad, ctx.tp), None, None


class _ReduceScatterSeq(torch.autograd.Function):
    """Forward reduce-scatter along the sequence; backward all-gather."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: TPContext) -> torch.Tensor:
        ctx.tp = tp
        return _reduce_scatter(x, tp)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_gather(grad, ctx.tp), None


def copy_to_tp(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _CopyToTP.apply(x, tp) if tp.active else x


def reduce_from_tp(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _ReduceFromTP.apply(x, tp) if tp.active else x


def gather_seq(x: torch.Tensor, tp: TPContext, reduce_grad: bool = True) -> torch.Tensor:
    return _GatherSeq.apply(x, tp, reduce_grad) if tp.active else x


def reduce_scatter_seq(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _ReduceScatterSeq.apply(x, tp) if tp.active else x


def enter_column(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Input of a column-parallel matmul: gathered under sequence parallelism."""
    return gather_seq(x, tp) if tp.sequence_parallel else copy_to_tp(x, tp)


def leave_row(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Output of a row-parallel matmul: summed (or reduce-scattered) over tp."""
    return reduce_scatter_seq(x, tp) if tp.sequence_parallel else reduce_from_tp(x, tp)


# --- layers --------------------------------------------------------------------


class ColumnParallelLinear(nn.Module):
    """``y = x Aᵀ + b`` with A split by output rows: [out/tp, in]."""

    def __init__(self, tp: TPContext, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        assert out_dim % tp.size == 0
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_dim // tp.size, in_dim))
        mark(self.weight, tp_dim=0)
        self.bias = nn.Parameter(torch.empty(out_dim // tp.size)) if bias else None
        if self.bias is not None:
            mark(self.bias, tp_dim=0)

    def forward(self, x: torch.Tensor, entered: bool = False) -> torch.Tensor:
        # [s(/tp), b, in] -> [s, b, out/tp]; ``entered``: x is already gathered/copied
        if not entered:
            x = enter_column(x, self.tp)
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """``y = x Aᵀ + b`` with A split by input columns: [out, in/tp]; b replicated."""

    def __init__(self, tp: TPContext, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        assert in_dim % tp.size == 0
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_dim, in_dim // tp.size))
        mark(self.weight, tp_dim=1)
        self.bias = nn.Parameter(torch.empty(out_dim)) if bias else None
        if self.bias is not None:
            mark(self.bias, seq_parallel=tp.sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [s, b, in/tp] -> [s(/tp), b, out]: partial sums, reduced across tp
        y = leave_row(F.linear(x, self.weight), self.tp)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """Word embedding split by vocabulary rows: [V/tp, h]; each rank looks up its range."""

    def __init__(self, tp: TPContext, vocab: int, hidden: int) -> None:
        super().__init__()
        self.tp = tp
        self.per_rank = vocab // tp.size
        self.start = tp.rank * self.per_rank
        self.weight = nn.Parameter(torch.empty(self.per_rank, hidden))
        mark(self.weight, tp_dim=0)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens [s, b] -> partial embeddings [s, b, h] (zero outside this rank's range);
        # the caller sums them with reduce_from_tp or reduce_scatter_seq
        if not self.tp.active:
            return F.embedding(tokens, self.weight)
        local = tokens - self.start
        outside = (local < 0) | (local >= self.per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        return out.masked_fill(outside.unsqueeze(-1), 0.0)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross entropy over logits split by vocabulary (Megatron): three all-reduces
    of one scalar per token (max, target logit, sum of exponentials)."""

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, target: torch.Tensor, tp: TPContext
    ) -> torch.Tensor:
        # logits [N, V/tp] float32, target [N] global ids -> loss [N]
        logits_max = logits.max(dim=-1).values
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=tp.group)
        logits = logits - logits_max.unsqueeze(-1)
        per_rank = logits.shape[-1]
        local = target - tp.rank * per_rank
        outside = (local < 0) | (local >= per_rank)
        local = local.masked_fill(outside, 0)
        predicted = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(predicted, group=tp.group)
        exp = logits.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=tp.group)
        ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), local, outside)
        return sum_exp.log() - predicted

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        softmax, local, outside = ctx.saved_tensors
        g = softmax.clone()
        rows = torch.arange(g.shape[0], device=g.device)
        g[rows, local] -= (~outside).to(g.dtype)
        return g * grad.unsqueeze(-1), None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, tp: TPContext
) -> torch.Tensor:
    """Mean cross entropy of ``logits`` [N, V/tp] against global ids ``target`` [N]."""
    logits = logits.float()
    if not tp.active:
        return F.cross_entropy(logits, target)
    return _VocabParallelCrossEntropy.apply(logits, target, tp).mean()
