"""A real 2-rank gloo job traced by commlens, profiled by torch.profiler and dumped by
the Flight Recorder at once: the profiler's traces and the dumps, imported, hold the
same ops and bytes as commlens's own run."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.trace.reader import load_run

PROG = str(Path(__file__).with_name("profprog.py"))
KEYS = ("rank", "op", "size_bytes", "bytes_in", "bytes_out", "peer")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gloo-job")
    traced, prof, fr = root / "traced", root / "prof", root / "fr"
    cmd = ["trace", "--out", str(traced), "--nproc", "2", "--", sys.executable, PROG]
    assert main([*cmd, str(prof), str(fr)]) == 0
    assert sorted(p.name for p in prof.iterdir()) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    assert sorted(p.name for p in fr.iterdir()) == ["rank_0", "rank_1"]
    return root


@pytest.fixture(scope="module")
def job(root: Path) -> tuple[Path, Path]:
    imported = root / "imported"
    assert main(["import", str(root / "prof"), "--out", str(imported)]) == 0
    return root / "traced", imported


def _ops(run_dir: Path) -> Counter[tuple[object, ...]]:
    return Counter(tuple(r[k] for k in KEYS) for r in load_run(run_dir).events.to_pylist())


def test_same_ops_and_bytes_as_commlens_trace(job: tuple[Path, Path]) -> None:
    traced, imported = job
    mine, theirs = _ops(traced), _ops(imported)
    assert sum(mine.values()) == 42  # DDP's set-up and two steps of every op kind, 2 ranks
    assert theirs == mine
    run = load_run(imported)
    # gloo's own threads ran the collectives: their annotations time them
    prov = run.manifest["import"]
    assert prov["device_time"] is False and run.manifest["time_semantics"] == "host"
    assert any("gloo annotation" in n for n in prov["notes"])
    assert all(r["t_end_ns"] >= r["t_issue_ns"] for r in run.events.to_pylist())


def test_report_on_the_imported_job(
    job: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, imported = job
    capsys.readouterr()
    assert main(["report", str(imported)]) == 0
    text = capsys.readouterr().out
    assert "imported from: kineto" in text and "c10d ops and gloo annotations" in text
    assert "exposed: the CPU op's own duration" in text
    assert main(["compare", str(job[0]), str(imported)]) == 0


def test_flight_recorder_dumps_of_the_same_job(root: Path) -> None:
    """gloo's Flight Recorder (torch 2.13) records no send/recv and runs a
    reduce_scatter as an all_reduce of its whole input: so said, the rest equal."""
    pytest.importorskip("commlens.importers.flight_recorder", reason="no Flight Recorder reader")
    out = root / "fr-run"
    assert main(["import", str(root / "fr"), "--format", "fr", "--out", str(out)]) == 0
    expected: Counter[tuple[object, ...]] = Counter()
    for r in load_run(root / "traced").events.to_pylist():
        if r["op"] in ("send", "recv"):
            continue
        if r["op"] == "reduce_scatter":
            r = {**r, "op": "all_reduce", "bytes_out": r["bytes_in"]}
        expected[tuple(r[k] for k in KEYS if k != "peer")] += 1
    got = Counter(
        tuple(r[k] for k in KEYS if k != "peer") for r in load_run(out).events.to_pylist()
    )
    assert got == expected
