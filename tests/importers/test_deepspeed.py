"""DeepSpeed comms-logger output: running totals differenced, summary tables as aggregate-only."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.trace.reader import load_run
from tests.importers.shared import trace

LINE = re.compile(r"comm op: (\w+) \| time \(ms\): ([\d.]+) \| msg size: ([\d.]+) ?([KM]?B)")


def _logged(path: Path) -> dict[str, list[float]]:
    """The latencies as logged, per op name, read independently of the importer."""
    out: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        m = LINE.search(line)
        if m:
            out.setdefault(m.group(1), []).append(float(m.group(2)))
    return out


def test_running_totals_are_differenced(tmp_path: Path) -> None:
    src = trace("deepspeed/generated-gloo-cpu/ds0.19.8_gloo_2rank_stdout.log")
    out = tmp_path / "run"
    assert main(["import", str(src), "--out", str(out)]) == 0
    rows = load_run(out).events.to_pylist()
    logged = _logged(src)
    names = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}
    for name, values in logged.items():
        if name == "log_summary_barrier":  # not a communication op
            assert not any(r["module"] == name for r in rows)
            continue
        mine = [r for r in rows if r["op"] == names.get(name, name)]
        mine.sort(key=lambda r: r["seq"])
        got = [(r["t_end_ns"] - r["t_issue_ns"]) / 1e6 for r in mine]
        increments = [values[0]] + [b - a for a, b in itertools.pairwise(values)]
        assert got == pytest.approx(increments, abs=1e-6), name
    # the three equal all-reduces of 1 MiB: 2.17, 8.25, 19.56 logged
    ar = [r for r in rows if r["op"] == "all_reduce" and r["size_bytes"] == 1 << 20]
    got_ar = [(r["t_end_ns"] - r["t_issue_ns"]) / 1e6 for r in ar]
    assert got_ar == pytest.approx([2.17, 6.08, 11.31])
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["world_size"] == 2  # from busbw/algbw
    assert any("running totals" in e for e in manifest["import"]["estimated"])


def test_verbose_values_kept_when_not_totals(tmp_path: Path) -> None:
    src = trace("deepspeed/tutorial-gpu-excerpts/verbose.log")
    out = tmp_path / "run"
    assert main(["import", str(src), "--out", str(out)]) == 0
    rows = load_run(out).events.to_pylist()
    assert [round((r["t_end_ns"] - r["t_issue_ns"]) / 1e6, 2) for r in rows] == [9.46, 0.11, 0.08]
    assert rows[0]["op"] == "reduce_scatter" and rows[0]["size_bytes"] == round(678.86 * 2**20)
    assert json.loads((out / "run.json").read_text())["world_size"] == 16


def test_summary_is_aggregate_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = trace("deepspeed/tutorial-gpu-excerpts/log_summary.txt")
    out = tmp_path / "run"
    assert main(["import", str(src), "--out", str(out), "--world-size", "16"]) == 0
    rows = load_run(out).events.to_pylist()
    volumes: dict[str, tuple[int, int]] = {}
    for r in rows:
        n, b = volumes.get(r["op"], (0, 0))
        volumes[r["op"]] = (n + 1, b + r["size_bytes"])
    assert volumes == {
        "broadcast": (147, 146 * 2048 + round(98.25 * 2**20)),
        "reduce_scatter": (40, 40 * round(678.86 * 2**20)),
    }
    assert json.loads((out / "run.json").read_text())["time_semantics"] == "synthetic"
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SYNTHETIC" in text and "times are synthetic" in text
    assert "of step time" not in text  # no time share presented as measured
    assert main(["validate", str(out)]) == 0  # volumes held: the whole log is step 0
    capsys.readouterr()
    assert main(["whatif", str(out), "--net", "tcp-10g"]) == 2
    assert "its times are synthetic" in capsys.readouterr().err
