"""The tracer never breaks training; broken runs still read, foreign files are refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import commlens
from commlens.errors import RunFormatError
from commlens.launch import free_port
from commlens.trace.schema import EVENT_COLUMNS
from commlens.trace.writer import EventWriter
from tests.capture.test_api import _all_ops
from tests.distributed import run_ranks

PROG = Path(__file__).with_name("faultprog.py")


def _job(out: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROG), str(out), mode, str(free_port())],
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_unwritable_output_leaves_training_identical(tmp_path: Path) -> None:
    plain = _job(tmp_path / "unused", "plain")
    assert plain.returncode == 0, plain.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    traced = _job(blocker / "run", "traced")
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout and plain.stdout.startswith("digest ")
    assert traced.stderr.count("commlens:") == 2, traced.stderr  # one per rank, only one
    assert "rank 0" in traced.stderr and "rank 1" in traced.stderr
    assert traced.stderr.count("recording stopped") == 2


def test_sigkill_of_one_rank_leaves_the_others_readable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    job = _job(out, "kill")
    assert job.returncode != 0
    run = commlens.load_run(out, quiet=True)
    # Rank 1 died by SIGKILL; the launcher then stopped rank 0 (blocked in a collective).
    assert run.manifest["ranks"]["1"]["status"] == "running"
    assert run.ranks == [0, 1]  # both read, from their flushed row groups
    assert any("rank 1 did not finish" in w for w in run.warnings)
    steps = dict(
        run.duckdb().execute("select rank, max(step) from events group by rank").fetchall()
    )
    assert steps[1] >= 1 and steps[0] >= 2  # steps before the kill survived


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("good")
    run_ranks(_all_ops, 2, str(out))
    return out


def test_truncated_rank_file_reads_with_a_warning(good_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    victim = run_dir / "rank-00001.parquet"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    run = commlens.load_run(run_dir, quiet=True)
    assert run.missing_ranks == [1] and run.ranks == [0]
    assert any("rank-00001.parquet" in w and "truncated" in w for w in run.warnings)


def test_foreign_files_are_refused_naming_the_file(good_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(good_run, run_dir)
    pq.write_table(pa.table({"x": [1, 2]}), run_dir / "rank-00002.parquet")
    with pytest.raises(RunFormatError, match=r"rank-00002\.parquet.*not a commlens events file"):
        commlens.load_run(run_dir)
    (run_dir / "rank-00002.parquet").write_text("hello")
    with pytest.raises(RunFormatError, match=r"rank-00002\.parquet.*not a Parquet file"):
        commlens.load_run(run_dir)
    (run_dir / "rank-00002.parquet").unlink()
    (run_dir / "run.json").write_text('{"format": "something-else"}')
    with pytest.raises(RunFormatError, match=r"run\.json.*not a commlens run manifest"):
        commlens.load_run(run_dir)
    with pytest.raises(RunFormatError, match="no such run directory"):
        commlens.load_run(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunFormatError, match="not a commlens run"):
        commlens.load_run(empty)


def test_writer_memory_is_bounded_by_row_groups(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path, 0, flush_events=1000, flush_seconds=3600)
    row = (
        0,
        0,
        "all_reduce",
        "python",
        "0",
        [0, 1],
        2,
        "",
        "float32",
        1,
        4,
        4,
        4,
        None,
        False,
        1,
        2,
        1,
        1e-9,
        0,
        "other",
        "",
    )
    assert len(row) == len(EVENT_COLUMNS)
    peak = 0
    for i in range(25_000):
        writer.append((0, i, *row[2:]))
        peak = max(peak, writer.buffered)
    # Never more than the batches the writer thread may have queued.
    assert peak <= (EventWriter.max_pending + 1) * 1000
    final = writer.close()
    meta = pq.ParquetFile(final).metadata
    assert meta.num_rows == 25_000 and meta.num_row_groups == 25
