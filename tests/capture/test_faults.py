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
from commlens.launch import free_port, launch_ranks
from commlens.trace.schema import EVENT_COLUMNS
from commlens.trace.writer import EventWriter
from tests.capture.test_api import _all_ops
from tests.distributed import run_ranks

PROG = Path(__file__).with_name("faultprog.py")
EXIT_PROG = Path(__file__).with_name("exitprog.py")


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


def test_sigterm_writes_the_completed_ops_not_yet_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    launch = launch_ranks([sys.executable, str(EXIT_PROG), str(out), "sigterm"], 2)
    assert launch.exit_codes == [-15, -15]  # each rank still ends by the signal
    run = commlens.load_run(out, quiet=True)
    assert {r["status"] for r in run.manifest["ranks"].values()} == {"terminated"}
    counts = run.duckdb().execute("select rank, count(*) from events group by rank").fetchall()
    assert sorted(counts) == [(0, 50), (1, 50)]


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


def test_a_write_error_in_the_writer_thread_is_reported_once(tmp_path: Path) -> None:
    """A disk error mid-run: on_error hears it once, appending never blocks, the rest is kept."""
    errors: list[BaseException] = []
    writer = EventWriter(tmp_path, 0, flush_events=10, flush_seconds=3600, on_error=errors.append)
    row = _row()
    for i in range(25):
        writer.append((0, i, *row[2:]))
    writer.flush()
    assert writer.n_events == 25 and not errors
    _block_next_parts(tmp_path / ".rank-00000.parts")
    for i in range(25, 25 + 10 * (EventWriter.max_pending + 3)):  # past the back-pressure bound
        writer.append((0, i, *row[2:]))
    writer.flush()
    assert len(errors) == 1 and isinstance(errors[0], OSError)
    assert writer.buffered == 0  # what could not be written is dropped, not held
    final = writer.close()  # what reached the disk is kept
    assert pq.read_table(final).column("seq").to_pylist() == list(range(25))


def test_recording_stops_once_when_parts_cannot_be_written(tmp_path: Path) -> None:
    res = run_ranks(_parts_fail, 2, str(tmp_path))
    for r in res:
        assert r["result"] == r["expected"]  # the collectives still ran, with the caller's data
        assert r["disabled"] and r["error"].startswith("IsADirectoryError")
    run = commlens.load_run(tmp_path, quiet=True)
    assert run.manifest["ranks"]["0"]["status"] == "recording-failed"
    assert run.events.num_rows == 2 * 4  # the part written before the failure


def _block_next_parts(parts: Path) -> None:
    """Make every later part fail to open, as a full or failed disk would."""
    done = len(list(parts.glob("part-*.bin")))
    for i in range(done, done + 1000):
        (parts / f"part-{i:06d}.tmp").mkdir()


def _parts_fail(rank: int, world: int, out: str) -> dict[str, object]:
    import torch
    import torch.distributed as dist

    from commlens.capture import api

    with commlens.capture(out, flush_events=4, align_clocks=False):
        dist.init_process_group("gloo")
        t = torch.ones(3)
        for _ in range(4):
            dist.all_reduce(t)
        rec = api.RECORDER
        assert rec is not None and rec.writer is not None
        rec.writer.flush()
        _block_next_parts(Path(out) / f".rank-{rank:05d}.parts")
        for _ in range(20):
            dist.all_reduce(t)
        rec.writer.flush()
        state = {"disabled": rec.disabled, "error": rec.error, "result": t.tolist()}
        dist.destroy_process_group()
    return {**state, "expected": [float(world**24)] * 3}


def _row() -> tuple[object, ...]:
    return (0, 0, "all_reduce", "python", "0", [0, 1], 2, "", "float32", 1, 4, 4, 4, None,
            False, 1, 2, 1, 1e-9, 0, "other", "")  # fmt: skip


@pytest.mark.parametrize("how", ["with", "started"])
def test_leaving_with_async_ops_in_flight_exits_cleanly(tmp_path: Path, how: str) -> None:
    """Completion callbacks never fire into a dying interpreter (that aborts the process)."""
    for attempt in range(3):  # the abort it guards against came on every run
        out = tmp_path / f"{how}-{attempt}"
        launch = launch_ranks([sys.executable, str(EXIT_PROG), str(out), how], 2)
        assert launch.ok, launch.exit_codes
        run = commlens.load_run(out)
        counts = run.duckdb().execute("select rank, count(*) from events group by rank").fetchall()
        assert sorted(counts) == [(0, 50), (1, 50)]
