"""validate of a traced run over worker processes: the verdict one process gives."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commlens.analysis import expectations, parallel
from commlens.analysis.expectations import validate_traced
from commlens.trace.reader import open_run
from commlens.trace.synthetic import Spec, generate


def _damage(file: Path, column: str) -> None:
    """Zero the first data page of ``column`` in a rank file (its footer stays valid)."""
    meta = pq.ParquetFile(file).metadata.row_group(0)
    chunk = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column
    )
    data = bytearray(file.read_bytes())
    start = chunk.data_page_offset
    data[start : start + chunk.total_compressed_size] = bytes(chunk.total_compressed_size)
    file.write_bytes(bytes(data))


@pytest.mark.e2e
def test_validate_is_the_same_over_three_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 32-rank run (tp 2 x pp 2 x dp 8: same-size, DDP bucket, ZeRO all-gather and
    send/receive expectations), one rank's file damaged in the second worker's share:
    the expectations, their details, the notes and the warnings are those of one process."""
    run = tmp_path / "run"
    generate(run, Spec(tp=2, pp=2, dp=8, steps=4))
    _damage(run / "rank-00017.parquet", "size_bytes")

    def held(jobs: str) -> tuple[dict[str, object], list[str], list[int]]:
        monkeypatch.setenv(parallel.JOBS_ENV, jobs)
        monkeypatch.setattr(expectations, "_RANKS_A_WORKER", 8)
        assert parallel.workers(32, 8) == int(jobs)
        with open_run(run) as view:
            result = validate_traced(view)
            return result.to_dict(), list(view.warnings), list(view.missing_ranks)

    one, three = held("1"), held("3")
    assert one == three
    verdict, warnings, missing = one
    assert missing == [17] and any("rank 17 skipped" in w for w in warnings)
    names = {e["name"] for e in verdict["expectations"]}  # type: ignore[attr-defined]
    assert {
        "same size on every member",
        "dp all-reduce bytes per synced step constant",
        "all_gather bytes per step constant",
        "every send received as sent",
    } <= names
