"""Study B on a reduced grid, with real runs: killed once, resumed, then its findings.

One sweep (gpt-tiny on 2 ranks, dp / zero3 / tp / pp at two sequence
lengths) is started as a subprocess, SIGKILLed as soon as its first point is
finished, and started again: only the missing points run. Its catalog must
then show Study B's findings and every point must validate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main
from commlens.sweep import findings, open_catalog
from commlens.sweep.catalog import POINT_FILE, read_point

pytestmark = pytest.mark.timeout(900)  # eight real runs, one of them killed

GRID = """
[sweep]
name = "study-b-small"
nproc = 2
steps = 3
warmup_steps = 1
micro_batch = 1
networks = ["tcp-10g", "rdma-100g"]

[grid]
model = ["gpt-tiny"]
scheme = ["dp", "zero3", "tp", "pp"]
seq_len = [32, 64]

[schemes.pp]
microbatches = 2
"""


def _pids_running_in(path: Path) -> list[int]:
    """Processes whose command line names ``path`` (the killed sweep's leftovers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd:
            pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("study-b")
    spec = base / "grid.toml"
    spec.write_text(GRID)
    out = base / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "commlens", "sweep", str(spec), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first: Path | None = None
    deadline = time.monotonic() + 240
    while first is None and time.monotonic() < deadline and proc.poll() is None:
        done = sorted(out.glob(f"points/*/{POINT_FILE}"))
        first = done[0] if done else None
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first is not None, "the sweep finished no point in 240 s"
    deadline = time.monotonic() + 60  # its point's run gets SIGTERM from the kernel
    while _pids_running_in(out) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _pids_running_in(out), "the killed sweep's point kept running"
    killed_with = sorted(p.parent.name for p in out.glob(f"points/*/{POINT_FILE}"))
    stamp = first.stat().st_mtime_ns
    t0 = time.monotonic()
    code = main(["sweep", str(spec), "--out", str(out)])
    yield {
        "out": out,
        "code": code,
        "first": first,
        "stamp": stamp,
        "killed_with": killed_with,
        "wall_s": time.monotonic() - t0,
    }


def test_a_killed_sweep_finishes_only_the_missing_points(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert resumed["code"] == 0
    out: Path = resumed["out"]
    assert resumed["first"].stat().st_mtime_ns == resumed["stamp"]  # not run again
    records = [read_point(out, p.name) for p in sorted((out / "points").iterdir())]
    assert len(records) == 8 and all(r is not None and r["status"] == "ok" for r in records)
    con = open_catalog(out)
    rows = con.execute("SELECT status, count(*) FROM points GROUP BY status").fetchall()
    assert rows == [("ok", 8)]
    # every point's run dir is whole: the one interrupted by the kill was run again
    for p in (out / "points").iterdir():
        assert (p / "run" / "run.json").is_file()


def test_every_point_validates(resumed: dict[str, Any]) -> None:
    con = open_catalog(resumed["out"])
    rows = con.execute("SELECT id, validate_ok, validate_summary FROM points").fetchall()
    assert all(ok for _, ok, _ in rows), rows


def test_zero3_moves_one_and_a_half_times_dp(resumed: dict[str, Any]) -> None:
    ratios = findings.zero_ratio(open_catalog(resumed["out"])).to_pylist()
    assert {r["seq_len"] for r in ratios} == {32, 64}
    for r in ratios:
        assert r["ratio_to_dp"] == pytest.approx(1.5, rel=0.05), r


def test_dp_volume_flat_and_model_parallel_volume_rising_with_sequence(
    resumed: dict[str, Any],
) -> None:
    rel = {
        (r["scheme"], r["seq_len"]): r["relative_volume"]
        for r in findings.volume_vs_seq(open_catalog(resumed["out"])).to_pylist()
    }
    assert rel[("dp", 64)] == pytest.approx(1.0, abs=0.01)
    assert rel[("zero3", 64)] == pytest.approx(1.0, abs=0.01)
    assert rel[("tp", 64)] > 1.8  # activations: linear in s (plus a few fixed scalars)
    assert rel[("pp", 64)] > 1.15  # the sends double, the tied-embedding all-reduce does not
    p2p = {
        r["seq_len"]: r["wire_bytes_per_rank_step"]
        for r in findings.volume_by_op(open_catalog(resumed["out"])).to_pylist()
        if r["scheme"] == "pp" and r["op"] == "send"
    }
    assert p2p[64] == pytest.approx(2 * p2p[32], rel=0.01)


def test_sizes_calls_and_report(resumed: dict[str, Any], tmp_path: Path) -> None:
    con = open_catalog(resumed["out"])
    hist = findings.size_histogram(con).to_pylist()
    assert {h["scheme"] for h in hist} == {"dp", "zero3", "tp", "pp"}
    ops = {(r["scheme"], r["op"]) for r in findings.volume_by_op(con).to_pylist()}
    assert {("pp", "send"), ("pp", "recv"), ("zero3", "all_gather"), ("tp", "all_reduce")} <= ops
    html = tmp_path / "b.html"
    assert main(["report", str(resumed["out"]), "-o", str(html)]) == 0
    text = html.read_text()
    assert "ZeRO volume relative to DP" in text and "Volume vs sequence length" in text
    assert os.path.getsize(html) > 10_000
