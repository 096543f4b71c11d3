"""Alpha-beta cost models of collective algorithms on one flat link type.

``S`` is the nccl-tests message size of the op (conventions §3: the buffer
for all-reduce/broadcast/reduce/send/recv, the gathered buffer for
all-gather/reduce-scatter/gather/scatter, the whole send buffer for
all-to-all), ``n`` the group size, ``α`` seconds per message, ``β`` seconds
per byte (see :class:`~commlens.predict.profiles.NetworkProfile`).
``L = ⌈log2 n⌉``. The formulas (Thakur, Rabenseifner & Gropp 2005; NCCL's
double binary tree for all-reduce):

- all_reduce: ring 2(n−1)α + 2(n−1)/n·Sβ; tree (NCCL's pipelined double
  binary trees) 2Lα + 2Sβ; direct 2α + 2(n−1)/n·Sβ
- all_gather, reduce_scatter, gather, scatter: ring (n−1)α + (n−1)/n·Sβ;
  tree (recursive doubling / halving) Lα + (n−1)/n·Sβ; direct α + (n−1)/n·Sβ
- broadcast, reduce: ring (pipelined chain) (n−1)α + Sβ; tree (binomial)
  L(α + Sβ); direct α + (n−1)·Sβ
- all_to_all: ring (pairwise exchange) (n−1)(α + Sβ/n); tree (Bruck)
  L(α + Sβ/2); direct α + (n−1)/n·Sβ
- send, recv: α + Sβ whatever the algorithm
- barrier: an all-reduce with S = 0

"direct" means every rank talks to all peers at once, paying one latency
per phase and limited by its own link. A group of one rank costs nothing.
``auto`` takes the faster of ring and tree for each call, as NCCL's tuner
does, and direct for all-to-all (NCCL's all-to-all is direct p2p).
"""

from __future__ import annotations

import math

from commlens.errors import UsageError
from commlens.optable import P2P_OPS

ALGORITHMS = ("ring", "tree", "direct", "auto")


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(n))) if n > 1 else 0


def flat_time(
    op: str, size_bytes: float, n: int, alpha: float, beta: float, algorithm: str
) -> float:
    """Seconds for one ``op`` of ``size_bytes`` over ``n`` ranks on one link type."""
    if algorithm == "auto":
        if op == "all_to_all":
            return flat_time(op, size_bytes, n, alpha, beta, "direct")
        return min(flat_time(op, size_bytes, n, alpha, beta, a) for a in ("ring", "tree"))
    if algorithm not in ALGORITHMS:
        raise UsageError(
            f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
        )
    s = float(size_bytes)
    if op in P2P_OPS:
        return alpha + s * beta
    if n <= 1:
        return 0.0
    lg = _log2(n)
    frac = (n - 1) / n
    if op == "barrier":
        return flat_time("all_reduce", 0.0, n, alpha, beta, algorithm)
    if op == "all_reduce":
        if algorithm == "ring":
            return 2 * (n - 1) * alpha + 2 * frac * s * beta
        if algorithm == "tree":
            return 2 * lg * alpha + 2 * s * beta
        return 2 * alpha + 2 * frac * s * beta
    if op in ("all_gather", "reduce_scatter", "gather", "scatter"):
        if algorithm == "ring":
            return (n - 1) * alpha + frac * s * beta
        if algorithm == "tree":
            return lg * alpha + frac * s * beta
        return alpha + frac * s * beta
    if op in ("broadcast", "reduce"):
        if algorithm == "ring":
            return (n - 1) * alpha + s * beta
        if algorithm == "tree":
            return lg * (alpha + s * beta)
        return alpha + (n - 1) * s * beta
    if op == "all_to_all":
        if algorithm == "ring":
            return (n - 1) * (alpha + s * beta / n)
        if algorithm == "tree":
            return lg * (alpha + s * beta / 2)
        return alpha + frac * s * beta
    raise UsageError(f"no cost model for op {op!r}")
