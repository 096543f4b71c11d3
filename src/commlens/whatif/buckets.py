"""The nodes' token buckets in a replay, on flat arrays (compiled kernels).

A node's bucket keeps the draws on it in the order of their bytes' leaving
(:func:`bucket_add`): the replay reaches the ops out of time order, so a draw
can come after one that leaves later; the level an op finds (:func:`level`) is
that of the draws that left before it only (one kept as levels in the order
reached took a later op's draw as made before: an op found the bucket empty
that was full then). Every node's draws have a segment of flat arrays
(``base``) sized in advance for all that can come there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from commlens.whatif.compiled import index, kernel, larger, smaller

LOOK_BACK = 64
"""Draws a bucket's level is found from at most (before them, it is taken as full)."""


class Buckets(NamedTuple):
    """Every node's bucket: its draws (see the module docstring)."""

    base: np.ndarray
    """Per node, where its segment of the draw arrays starts (one more: the end)."""
    leaves: np.ndarray
    """Per node's segment, each draw in the order of its leaving: when it left, seconds
    of wire it took, when its bytes had left."""
    drawn: np.ndarray
    outs: np.ndarray
    draws: np.ndarray
    """Per node, its draws so far."""
    capacity: float
    """Seconds of wire a bucket holds when full."""
    on: bool
    """False: the links have no bucket (every op finds it as its times say)."""


@kernel
def bisect_right(a: np.ndarray, lo: int, hi: int, x: float) -> int:
    """The first index of ``a[lo:hi]`` (sorted) whose item is above ``x``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@kernel
def level(B: Buckets, node: int, t: float) -> float:
    """Seconds of wire ``node``'s bucket holds at ``t``: full at first, drained by each
    draw that left before ``t``, refilled at one second a second once its bytes left."""
    capacity, leaves, outs = B.capacity, B.leaves, B.outs
    lo = B.base[node]
    at = bisect_right(leaves, lo, lo + B.draws[node], t)
    k, low = at, max(at - LOOK_BACK, lo)
    while k > low:  # back to a draw that found the bucket full (idle long enough)
        k -= 1
        if k == lo or leaves[k] - outs[k - 1] >= capacity:
            break
    held, since = capacity, -math.inf
    for j in range(k, at):
        held = larger(smaller(capacity, held + larger(leaves[j] - since, 0.0)) - B.drawn[j], 0.0)
        since = larger(since, outs[j])
    return smaller(capacity, held + larger(t - since, 0.0))


@kernel
def bucket_add(B: Buckets, node: int, t: float, drawn: float, out: float) -> None:
    """A draw of ``drawn`` seconds of wire on ``node``'s bucket leaving at ``t``, its
    bytes gone at ``out``."""
    lo = B.base[node]
    hi = lo + B.draws[node]
    at = bisect_right(B.leaves, lo, hi, t)
    for j in range(hi, at, -1):
        B.leaves[j], B.drawn[j], B.outs[j] = B.leaves[j - 1], B.drawn[j - 1], B.outs[j - 1]
    B.leaves[at], B.drawn[at], B.outs[at] = t, drawn, out
    B.draws[node] += 1


@kernel
def draw(
    B: Buckets, nodes: np.ndarray, lo: int, hi: int, t: float, drawn: float, credit: float
) -> float:
    """An op's bytes (``drawn`` seconds of wire, of which a full bucket saves ``credit``)
    leave from ``t``: take them from the buckets of ``nodes[lo:hi]``. What share of a
    full bucket's credit it goes without (0: full, 1: empty)."""
    if credit <= 0.0:
        return 0.0
    least = math.inf
    for q in range(lo, hi):
        held = level(B, index(nodes[q]), t)
        least = held if q == lo else smaller(least, held)
    got = smaller(least, credit)
    out = t + drawn - got  # when its bytes have left, the buckets empty or what is left
    for q in range(lo, hi):
        bucket_add(B, index(nodes[q]), t, drawn, out)
    return 1.0 - got / credit
