"""The GPU-stream replay of runs imported from profiler traces (whatif/streams.py):
a hand-built two-rank program with answers worked out by hand, and the 8-rank V100
DLRM job replaying itself exactly from its measured op times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from commlens.cli.main import main
from commlens.importers.model import ImportedRun, Op, Provenance, RankTrace
from commlens.importers.write import write_run
from commlens.trace.kernels import COMM, COMPUTE, KERNELS_SCHEMA, SYNC
from commlens.whatif import streams
from commlens.whatif.model import Program, build_program
from commlens.whatif.source import read_trace
from commlens.whatif.study import run_study

T0 = 1_000_000_000_000  # ns: the hand-built run's time 0
US = 1000


def _op(rank: int, start: int, end: int, cpu: int) -> Op:
    return Op(
        "all_reduce",
        T0 + start * US,
        T0 + end * US,
        t_wait_ns=(end - start) * US,
        pg_name="0",
        pg_ranks=(0, 1),
        group_size=2,
        dtype="float32",
        count=1 << 18,
        bytes_in=1 << 20,
        bytes_out=1 << 20,
        size_bytes=1 << 20,
        step=0,
        device=f"device {rank}",
        t_cpu_issue_ns=T0 + cpu * US,
        stream=13,
    )


def _k(
    kind: str, stream: int | None, start: int, end: int, launch: int | None, op: int | None = None
) -> tuple[Any, ...]:
    at = None if launch is None else T0 + launch * US
    return (kind, stream, T0 + start * US, T0 + end * US, at, 1, op)


def _table(rows: list[tuple[Any, ...]]) -> pa.Table:
    """Kernel rows as the importer hands them to the writer (``seq``: the op's index)."""
    names = KERNELS_SCHEMA.names
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], KERNELS_SCHEMA)


def hand_built(out: Path) -> Path:
    """Two ranks, one all-reduce on stream 13, compute on stream 7 (times in µs):

    rank 0: A [10, 110] launched at 0; the all-reduce issued at 20 (kernel launched at
    25) waits for A, runs [110, 200]; B [110, 150] launched at 30; C [202, 252]
    launched at 40 waits for the all-reduce (2 µs after its end).
    rank 1: A' [10, 60]; the all-reduce's kernel [60, 200] (its transfer starts when
    rank 0's kernel does, at 110); C' [202, 222]; a sync called at 45 returns at 205,
    after the all-reduce; D [215, 225] launched at 210, after the sync.
    Both steps run [0, 250] on the CPU.
    """
    run = ImportedRun(Provenance("kineto", device_time=True), world_size=2, backend="nccl")
    r0 = RankTrace(0, host="h", ops=[_op(0, 110, 200, 20)], steps=[(0, T0, T0 + 250 * US)])
    r0.kernels = _table(
        [
            _k(COMPUTE, 7, 10, 110, 0),
            _k(COMM, 13, 110, 200, 25, 0),
            _k(COMPUTE, 7, 110, 150, 30),
            _k(COMPUTE, 7, 202, 252, 40),
        ]
    )
    r1 = RankTrace(1, host="h", ops=[_op(1, 60, 200, 20)], steps=[(0, T0, T0 + 250 * US)])
    r1.kernels = _table(
        [
            _k(COMPUTE, 7, 10, 60, 0),
            _k(COMM, 13, 60, 200, 25, 0),
            _k(COMPUTE, 7, 202, 222, 40),
            (SYNC, None, T0 + 45 * US, T0 + 205 * US, None, 1, None),
            _k(COMPUTE, 7, 215, 225, 210),
        ]
    )
    run.ranks = {0: r0, 1: r1}
    write_run(run, out)
    return out


def _program(path: Path) -> tuple[Program, streams.StreamProgram]:
    trace = read_trace(path)
    assert streams.applies(trace, path)
    prog = build_program(trace)
    return prog, streams.build(path, prog)


def _at(sp: streams.StreamProgram, values: list[int]) -> list[tuple[int, int, int]]:
    """(rank, start µs, end µs) of every kernel, sorted."""
    return sorted(
        (r, (values[a] - T0) // US, (values[b] - T0) // US) for r, a, b, _, _ in sp.kernels
    )


def test_hand_built_program_replays_itself(tmp_path: Path) -> None:
    _prog, sp = _program(hand_built(tmp_path / "run"))
    assert sp.evaluate() == sp.measured
    study = run_study(tmp_path / "run", "1gbit")
    assert study.check.max_step_error == 0.0 and study.check.max_event_error_s == 0.0
    figs = study.captured.figures
    assert figs.step_s == [pytest.approx(252e-6)]  # rank 0: C ends at 252
    # comm: rank 0 [110, 200] (B beside it until 150: 50 exposed), rank 1 [60, 200] (140)
    assert figs.comm_s == pytest.approx((90e-6 + 140e-6) / 2)
    assert figs.exposed_s == pytest.approx((50e-6 + 140e-6) / 2)
    assert any("GPU streams" in a for a in study.assumptions)


def test_hand_built_program_with_a_longer_op(tmp_path: Path) -> None:
    """The all-reduce takes 190 µs from its transfer's start (110) instead of 90: it ends
    at 300 on both ranks; C and C' follow 2 µs later; B, A, A' stay; rank 1's sync
    returns at 305 (5 µs after the op, as captured) and D, launched 5 µs after it,
    starts 315. Steps: rank 0 max(250, 352), rank 1 max(250 + 100 moved by the sync, 325)."""
    prog, sp = _program(hand_built(tmp_path / "run"))
    seconds = np.full(prog.trace.events, 190e-6)
    value = sp.evaluate(streams.op_gaps(sp, seconds))
    assert _at(sp, value) == [
        (0, 10, 110),
        (0, 110, 150),
        (0, 110, 300),
        (0, 302, 352),
        (1, 10, 60),
        (1, 60, 300),
        (1, 302, 322),
        (1, 315, 325),
    ]
    figs = streams.figures(sp, prog, value, [0])
    assert figs.step_s == [pytest.approx(352e-6)]
    assert figs.comm_s == pytest.approx((190e-6 + 240e-6) / 2)
    assert figs.exposed_s == pytest.approx((150e-6 + 240e-6) / 2)
    row = figs.ops[0]
    assert row.service_s == pytest.approx(190e-6)
    # waiting: rank 0 none, rank 1 from 60 to 110; per rank and step
    assert row.wait_s == pytest.approx(50e-6 / 2)
    # the step ends with C (352): C 50, its 2 us behind the op, the transfer 190, the
    # issue's wait for A 0, A 100, A's launch latency 10
    path = {p.op: p.seconds for p in figs.critical}
    assert path == {"compute": pytest.approx(162e-6), "all_reduce": pytest.approx(190e-6)}


def test_shorter_op_never_makes_a_step_longer(tmp_path: Path) -> None:
    prog, sp = _program(hand_built(tmp_path / "run"))
    steps = []
    for us in (10, 90, 190, 1000):
        value = sp.evaluate(streams.op_gaps(sp, np.full(prog.trace.events, us * 1e-6)))
        steps.append(streams.figures(sp, prog, value, [0]).step_s[0])
    assert steps == sorted(steps)
    assert steps[0] == pytest.approx(250e-6)  # the CPU's step end then bounds rank 0


# -- the real DLRM job ---------------------------------------------------------------

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
DLRM = SHARED / "kineto/param-dlrm-8rank"


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not DLRM.is_dir():
        pytest.skip(f"{DLRM} is not here (the shared traces are not laid out beside the project)")
    out = tmp_path_factory.mktemp("dlrm") / "run"
    kineto, et = DLRM / "dlrm_kineto.tar.gz", DLRM / "dlrm_pytorch_et.tar.gz"
    assert main(["import", str(kineto), str(et), "--out", str(out)]) == 0
    return out


def test_dlrm_replays_itself_exactly(dlrm: Path) -> None:
    _prog, sp = _program(dlrm)
    assert len(sp.kernels) > 8 * 200  # every kernel of the 8 GPUs, compute and comm
    assert sp.evaluate() == sp.measured  # every kernel, op end and sync, to the ns
    study = run_study(dlrm, "rdma-100g,tcp-10g,1gbit")
    assert study.check.max_step_error == 0.0 and study.check.max_event_error_s == 0.0
    captured = study.captured.figures.median_step_s
    steps = [a.figures.median_step_s for a in study.answers]
    assert captured <= steps[1] <= steps[2]  # slower links: never a shorter step
    assert steps[2] > 2 * captured  # 2.5 MB of all-reduce per step on 1 Gbit/s


def test_dlrm_whatif_prints_the_stream_assumptions(
    dlrm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["whatif", str(dlrm), "--net", "tcp-10g"]) == 0
    out = capsys.readouterr().out
    assert "within 0.000%" in out
    assert "no dependency edges" in out and "not blocked by NCCL" in out


def test_a_device_run_without_kernels_gets_the_host_replay(dlrm: Path, tmp_path: Path) -> None:
    """An imported run written before kernels files existed (or with them removed) is
    replayed as before: the stream replay is chosen by what the run holds."""
    old = tmp_path / "old"
    old.mkdir()
    for path in dlrm.iterdir():
        if path.is_file() and not path.name.startswith("kernels-"):
            (old / path.name).write_bytes(path.read_bytes())
    study = run_study(old, "tcp-10g")
    assert not any("GPU streams" in a for a in study.assumptions)
    assert any("GPU streams" in a for a in run_study(dlrm, "tcp-10g").assumptions)


@pytest.mark.parametrize("planted", ["link", "garbage"])
def test_a_bad_kernels_file_is_one_line(
    tmp_path: Path, planted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = hand_built(tmp_path / "run")
    victim = run / "kernels-00001.parquet"
    victim.unlink()
    if planted == "link":
        victim.symlink_to("/dev/zero")
    else:
        victim.write_text("not parquet\n")
    assert main(["whatif", str(run), "--net", "1gbit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kernels-00001.parquet" in err[0]


def test_dlrm_slower_links_never_replay_faster(dlrm: Path) -> None:
    """The stream replay is a max-plus system: longer ops never end anything sooner."""
    rates = ["400gbit", "100gbit", "25gbit", "10gbit", "1gbit", "100mbit"]
    study = run_study(dlrm, ",".join(rates))
    steps = [a.figures.median_step_s for a in study.answers]
    comm = [a.figures.comm_s for a in study.answers]
    assert steps == sorted(steps) and comm == sorted(comm)
    assert steps[-1] > steps[0]
