"""What an independent observer saw: torch.profiler's ``c10d::`` records per op."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from tests.distributed import event_rows

# profiler record -> commlens op
C10D_OPS = {
    "c10d::allreduce_": "all_reduce",
    "c10d::allreduce_coalesced_": "all_reduce",
    "c10d::allgather_": "all_gather",
    "c10d::_allgather_base_": "all_gather",
    "c10d::allgather_into_tensor_coalesced_": "all_gather",
    "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::_reduce_scatter_base_": "reduce_scatter",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "c10d::broadcast_": "broadcast",
    "c10d::reduce_": "reduce",
    "c10d::gather_": "gather",
    "c10d::scatter_": "scatter",
    "c10d::alltoall_base_": "all_to_all",
    "c10d::alltoall_": "all_to_all",
    "c10d::send": "send",
    "c10d::recv_": "recv",
    "c10d::barrier": "barrier",
}


def profiled_ops(prof: Any) -> dict[str, int]:
    """Calls per op among the profiler's ``c10d::`` records (one per dispatcher call)."""
    names = [e.name for e in prof.events() if e.name.startswith("c10d::")]
    unknown = sorted({n for n in names if n not in C10D_OPS})
    assert not unknown, unknown
    return dict(collections.Counter(C10D_OPS[n] for n in names))


def recorded_ops(run: Path, rank: int) -> dict[str, int]:
    """Calls per op that commlens recorded on ``rank``."""
    rows = event_rows(run, f"select op, count(*) from events where rank = {rank} group by op")
    return {op: n for op, n in rows}


def rows(run: Path, sql: str) -> list[tuple[Any, ...]]:
    return event_rows(run, sql)
