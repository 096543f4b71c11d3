"""The tracer never breaks training; broken runs still read, foreign files are refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import commlens
import commlens.capture.rankfile as rankfile_module
from commlens.capture.recorder import Recorder
from commlens.errors import RunFormatError
from commlens.launch import free_port, launch_ranks
from commlens.trace.packed import expand, read_packed_parts
from commlens.trace.schema import EVENT_COLUMNS, EVENT_SCHEMA
from commlens.trace.writer import EventWriter
from tests.capture.killprog import slowed
from tests.capture.test_api import _all_ops
from tests.distributed import run_ranks

PROG = Path(__file__).with_name("faultprog.py")
EXIT_PROG = Path(__file__).with_name("exitprog.py")
KILL_PROG = Path(__file__).with_name("killprog.py")
# The kill test's writer period, and the bound it must meet: the period plus
# the time one part takes to write (milliseconds; 0.75 s allowed for a busy
# machine). The killed rank spends QUIET_S past its marker, more than the bound.
FLUSH_S = 0.25
BOUND_S = FLUSH_S + 0.75
QUIET_S = 1.25


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
    """Ops completed, steps ended and clocks measured past the bound before a SIGKILL survive.

    The killed rank's last ops sit in the recorder, never collected by the
    recording thread: only the writer thread's timed drain writes them.
    Repeated, with the rank idle and busy at the kill, and on a disk whose
    every fsync waits 30 ms (busy, it once kept the writer thread writing
    one-event parts without end, and its rank json stayed as first written).
    """
    tries = ["quiet", "busy", "quiet", "busy", "quiet", "busy 0.03", "quiet 0.03"]
    for attempt, how in enumerate(tries):
        out = tmp_path / f"{attempt}-{how.replace(' ', '-')}"
        argv = [sys.executable, str(KILL_PROG), str(out), str(FLUSH_S), str(QUIET_S), *how.split()]
        launch = launch_ranks(argv, 2)
        # Rank 1 died by SIGKILL; the launcher then stopped rank 0 by SIGTERM.
        assert launch.exit_codes == [-15, -9] and launch.first_failed == 1, how
        killed_ns = json.loads((out / "kill-1.json").read_text())["t_ns"]
        marker = json.loads((out / "marker-1.json").read_text())
        assert not (out / "rank-00001.parquet").exists()  # never a partial rank file
        run = commlens.load_run(out, quiet=True)
        assert run.ranks == [0, 1]
        assert any("rank 1 did not finish" in w for w in run.warnings)
        ranks = run.manifest["ranks"]
        assert ranks["0"]["status"] == "terminated" and ranks["1"]["status"] == "running"
        # The killed rank's step windows and clock offset, from its rank json.
        steps = ranks["1"]["steps"]
        # DDP's wrap-time checks make a set-up window (step -1) before the steps
        kept = [s["step"] for s in steps if s.get("segment") != "setup"]
        assert kept == list(range(marker["steps"]))
        assert all(s["t_start_ns"] < s["t_end_ns"] < killed_ns for s in steps)
        assert {"offset_ns", "rtt_ns", "t_ref_ns"} <= set(ranks["1"]["clock"])
        events = {
            rank: run.duckdb()
            .execute(
                "select seq, api, is_async, step, t_end_ns, op from events"
                f" where rank = {rank} order by seq"
            )
            .fetchall()
            for rank in (0, 1)
        }
        seqs = {rank: [e[0] for e in rows] for rank, rows in events.items()}
        # No op lost in the middle; the stopped rank kept every op it recorded.
        assert seqs[1] == list(range(len(seqs[1]))) and seqs[0] == list(range(len(seqs[0])))
        assert len(seqs[0]) >= len(seqs[1]) >= marker["ops"]
        before = events[1][: marker["ops"]]  # what the rank recorded before its quiet spell
        buckets = [e for e in before if e[1] == "c10d" and e[5] == "all_reduce"]
        assert len(buckets) == 4  # DDP buckets, read later (beside its C++ set-up syncs)
        assert [e[1:3] for e in before].count(("python", True)) == 5  # async, never waited
        assert [e[3] for e in buckets] == [0, 1, 2, 3]
        assert ranks["1"]["events"] >= marker["ops"]
        # Every op rank 0 completed more than the bound before the kill, rank 1 has
        # too (both ranks record the same ops under the same seqs).
        settled = [e for e in events[0] if e[4] < killed_ns - BOUND_S * 1e9]
        assert len(settled) >= marker["ops"]
        assert len(seqs[1]) >= len(settled), (how, len(seqs[1]), len(settled))


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


def test_the_writer_thread_drains_writes_and_checkpoints_on_its_timer(tmp_path: Path) -> None:
    """Without any kick: the drained events reach the disk, then the checkpoint runs."""
    calls: list[str] = []
    row = _row()
    holder: list[EventWriter] = []

    def drain() -> None:
        calls.append("drain")
        if len(calls) == 1:  # past the back-pressure bound: the writer thread never waits
            for i in range(10 * (EventWriter.max_pending + 2)):
                holder[0].append((0, i, *row[2:]))

    def checkpoint() -> None:
        on_disk = sum(t.num_rows for t in read_packed_parts(parts, 0, EVENT_SCHEMA))
        calls.append(f"checkpoint {on_disk}")

    parts = tmp_path / ".rank-00000.parts"
    writer = EventWriter(
        tmp_path, 0, flush_events=10, flush_seconds=0.05, drain=drain, checkpoint=checkpoint
    )
    holder.append(writer)
    deadline = time.monotonic() + 30
    while calls.count("drain") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    final = writer.close()
    n = 10 * (EventWriter.max_pending + 2)
    assert calls[:4] == ["drain", f"checkpoint {n}", "drain", f"checkpoint {n}"]
    assert pq.read_table(final).column("seq").to_pylist() == list(range(n))


def test_a_job_appending_faster_than_parts_are_written_still_gets_its_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timed pass writes what was queued when it began, then checkpoints.

    Each fsync waits 30 ms (a loaded disk) while an op is appended every 5 ms:
    a pass that wrote until the queue was empty never ended while the job ran.
    """
    monkeypatch.setattr(os, "fsync", slowed(os.fsync, 0.03))
    checkpoints: list[float] = []
    writer = EventWriter(
        tmp_path, 0, flush_events=100_000, flush_seconds=0.05,
        checkpoint=lambda: checkpoints.append(time.monotonic()),
    )  # fmt: skip
    row = _row()
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 1.5:
        writer.append((0, n, *row[2:]))
        n += 1
        time.sleep(0.005)
    during = [t for t in checkpoints if t < t0 + 1.5]
    final = writer.close()
    # A pass is one part's write (about 0.1 s here) plus the period: about ten.
    assert len(during) >= 4, (len(during), n)
    assert pq.read_table(final).column("seq").to_pylist() == list(range(n))


def test_rank_json_rewrites_are_spaced_by_cpu_time_not_by_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk never delays the next rewrite; a large json's costly encoding does."""
    real_write = rankfile_module.write_json_atomic
    big = rankfile_module.META_SPACED_FROM

    def rank_json_steps() -> int:
        return len(json.loads((tmp_path / "rank-00000.json").read_text())["steps"])

    for cost, before in (("disk", 0), ("disk", big), ("cpu", big)):

        def costly_write(
            path: Path, data: dict[str, object], cost: str = cost, **kw: object
        ) -> None:
            if cost == "disk":
                time.sleep(0.2)  # waits, holding no CPU: no spacing
            else:
                end = time.thread_time() + 0.02  # 20 ms of CPU: 2 s to the next rewrite
                while time.thread_time() < end:
                    pass
            real_write(path, data, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(rankfile_module, "write_json_atomic", costly_write)
        rec = Recorder(tmp_path)
        rec.rank, rec.world_size = 0, 1
        window = {"step": 0, "t_start_ns": 1, "t_end_ns": 2}
        rec.steps.steps.extend([window] * before)
        rec._checkpoint()
        assert rank_json_steps() == before
        if cost == "disk" and before:  # spaced by its CPU time: the 0.2 s wait would be 20 s
            assert rec.rank_file.due - time.monotonic() < 5.0
            continue
        rec.steps.steps.append(window)
        rec._checkpoint()
        assert rank_json_steps() == before + (cost == "disk"), (cost, before)


def test_a_failed_close_leaves_the_parts_and_no_rank_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank file appears whole or not at all; until then the parts are what reads."""
    writer = EventWriter(tmp_path, 0, flush_events=4, flush_seconds=3600)
    row = _row()
    for i in range(10):
        writer.append((0, i, *row[2:]))
    writer.flush()
    calls = 0

    def failing_expand(*args: object) -> pa.Table:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk failed")
        return expand(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("commlens.trace.writer.expand", failing_expand)
    with pytest.raises(OSError, match="disk failed"):
        writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".rank-00000.parts", ".run.live"]
    parts = read_packed_parts(tmp_path / ".rank-00000.parts", 0, EVENT_SCHEMA)
    assert [seq for t in parts for seq in t.column("seq").to_pylist()] == list(range(10))


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

    from commlens.capture.intercept import ACTIVE

    with commlens.capture(out, flush_events=4, align_clocks=False):
        dist.init_process_group("gloo")
        t = torch.ones(3)
        for _ in range(4):
            dist.all_reduce(t)
        rec = ACTIVE.recorder
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
