"""What an independent observer saw: torch.profiler's ``c10d::`` records per op."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from commlens.analysis.expectations import GRADIENTS
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


def validated(run: Path) -> tuple[int, dict[str, Any]]:
    """``commlens validate RUN --format json``: (exit code, its verdict)."""
    import contextlib
    import io
    import json

    from commlens.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["validate", str(run), "--format", "json"])
    return code, json.loads(out.getvalue())


def holds_with_gradients(run: Path, tmp: Path) -> dict[str, Any]:
    """Assert that ``run`` validates with its gradient-bytes check formed, and that a
    copy of it with every op's bytes tripled fails; the verdict on ``run``."""
    import shutil

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    code, verdict = validated(run)
    assert code == 0 and verdict["ok"], verdict
    grads = [e for e in verdict["expectations"] if e["name"] == GRADIENTS]
    assert grads and all(e["formed"] and e["ok"] for e in grads), grads
    tampered = tmp / f"{run.name}-tripled"
    shutil.copytree(run, tampered)
    for path in sorted(tampered.glob("rank-*.parquet")):
        table = pq.read_table(path)
        i = table.schema.get_field_index("size_bytes")
        tripled = pc.multiply(table.column(i), pa.scalar(3, pa.int64()))
        pq.write_table(table.set_column(i, "size_bytes", tripled), path)
    code, bad = validated(tampered)
    assert code == 1 and not bad["ok"]
    assert [e for e in bad["expectations"] if e["name"] == GRADIENTS and not e["ok"]]
    return verdict
