"""Groups of a layout, enumerated in O(world size) for any scale.

``ParallelDims.groups`` is written for clarity and costs O(world · n); the
model needs every group of a role at 4096 ranks, so it enumerates them here
from the same Megatron order (``rank = pp·dp·tp + dp·tp + tp``).
"""

from __future__ import annotations

from commlens.job.parallel import ParallelDims


def role_groups(dims: ParallelDims, role: str) -> list[tuple[int, ...]]:
    """Every group of ``role`` ("dp", "tp", "pp"), as tuples of global ranks."""
    d, t, p = dims.dp, dims.tp, dims.pp
    if role == "tp":
        return [tuple(range(start, start + t)) for start in range(0, dims.world_size, t)]
    if role == "dp":
        return [tuple(s * d * t + i * t + j for i in range(d)) for s in range(p) for j in range(t)]
    if role == "pp":
        return [tuple(s * d * t + i * t + j for s in range(p)) for i in range(d) for j in range(t)]
    raise ValueError(f"unknown role {role!r}")


def boundary_pairs(dims: ParallelDims) -> list[tuple[int, int]]:
    """(sender, receiver) of every forward pipeline boundary."""
    return [
        (group[s], group[s + 1]) for group in role_groups(dims, "pp") for s in range(dims.pp - 1)
    ]


def embedding_groups(dims: ParallelDims) -> list[tuple[int, ...]]:
    """First and last stage of every pipeline (the tied-embedding all-reduce groups)."""
    if dims.pp == 1:
        return []
    return [(group[0], group[-1]) for group in role_groups(dims, "pp")]
