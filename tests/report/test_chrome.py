"""Chrome trace export: loads as JSON, one X event per op, profiler argument names."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from commlens.analysis import open_run
from commlens.cli.main import main

DATA = Path(__file__).parent.parent / "data"
PROFILER_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
)


def test_chrome_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    assert main(["export", str(DATA / "tiny_run"), "--format", "chrome", "-o", str(out)]) == 0
    assert "wrote 52 ops" in capsys.readouterr().err
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    run = open_run(DATA / "tiny_run")
    expected = Counter(
        (r["rank"], r["op"]) for r in run.sql("SELECT rank, op FROM events").to_pylist()
    )
    assert Counter((e["pid"], e["name"]) for e in ops) == expected
    assert len(ops) == 52
    for e in ops:
        assert e["cat"] == "comm" and e["dur"] >= 0 and e["ts"] >= 0
        assert all(k in e["args"] for k in PROFILER_ARGS)
    dp = next(
        e
        for e in ops
        if e["args"]["Process Group Ranks"] == "[0, 1, 2, 3]" and e["name"] == "all_gather"
    )
    assert dp["args"]["In msg nelems"] == 16384 // 4  # 16 KiB of fp32 in
    assert dp["args"]["Out msg nelems"] == 65536 // 4  # 64 KiB gathered
    assert dp["args"]["Group size"] == 4 and dp["args"]["dtype"] == "float32"
    assert dp["dur"] == pytest.approx(400.0 if dp["pid"] != 3 else 300.0)
    # steps marked on every rank as begin/end pairs
    steps = [e for e in events if e.get("cat") == "step"]
    assert Counter(e["ph"] for e in steps) == {"b": 8, "e": 8}
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {r: f"rank {r}" for r in range(4)}
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert (0, "DDP gradient buckets") in threads
    # the two DDP buckets overlap: the second goes on its own track; no track has
    # overlapping complete events, and every track used is named
    assert (0, "DDP gradient buckets (2)") in threads
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in ops:
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert set(tracks) <= named
    for spans in tracks.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-3 for a, b in itertools.pairwise(spans))


def test_chrome_trace_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(DATA / "tiny_run")]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 52


def test_chrome_trace_of_one_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(DATA / "tiny_run"), "--steps", "1"]) == 0
    events = json.loads(capsys.readouterr().out)["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    assert len(ops) == 26 and {e["args"]["Step"] for e in ops} == {1}
    assert Counter(e["ph"] for e in events if e.get("cat") == "step") == {"b": 4, "e": 4}
