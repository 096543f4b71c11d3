"""Throughput from the manifest; comparing runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commlens.analysis import open_run, throughput_summary, throughput_table
from commlens.analysis.compare import compare_ops, compare_summary, run_labels
from commlens.trace.synthetic import ev, write_run


def test_per_step_records_and_warmup(tmp_path: Path) -> None:
    records = [
        {
            "step": 0,
            "time_s": 0.5,
            "loss": 5.0,
            "tokens_per_s": 100.0,
            "tflops": 1.0,
            "warmup": True,
        },
        {
            "step": 1,
            "time_s": 0.1,
            "loss": 4.0,
            "tokens_per_s": 1000.0,
            "tflops": 2.0,
            "warmup": False,
        },
        {
            "step": 2,
            "time_s": 0.1,
            "loss": 3.0,
            "tokens_per_s": 3000.0,
            "tflops": 4.0,
            "warmup": False,
        },
    ]
    run = open_run(
        write_run(
            tmp_path / "r",
            [ev(0, "all_reduce", 0, 10)],
            world_size=1,
            rank_meta={0: {"steps_metrics": records}},
        )
    )
    table = throughput_table(run)
    assert table.column("tokens_per_s").to_pylist() == [100.0, 1000.0, 3000.0]
    assert table.column("step_s").to_pylist() == [0.5, 0.1, 0.1]  # from time_s: no windows
    (row,) = throughput_summary(table).to_pylist()
    assert row["steps"] == 2
    assert row["tokens_per_s"] == pytest.approx(2000.0)
    assert row["tflops"] == pytest.approx(3.0)
    assert row["last_loss"] == 3.0


def test_workload_amounts_divided_by_step_time(tmp_path: Path) -> None:
    run = open_run(
        write_run(
            tmp_path / "r",
            [ev(r, "all_reduce", 0, 10) for r in (0, 1)],
            world_size=2,
            steps={r: [(0, 100_000), (100_000, 300_000)] for r in (0, 1)},
            extra={"workload": {"tokens_per_step": 2000, "flops_per_step": 4e12}},
        )
    )
    rows = throughput_table(run).to_pylist()
    assert len(rows) == 4
    r0 = [r for r in rows if r["rank"] == 0]
    # per rank: 1000 tokens and 2e12 FLOP per step; steps of 0.1 s and 0.2 s
    assert r0[0]["tokens_per_s"] == pytest.approx(10_000)
    assert r0[1]["tokens_per_s"] == pytest.approx(5_000)
    assert r0[0]["tflops"] == pytest.approx(20.0)
    summary = throughput_summary(throughput_table(run)).to_pylist()
    assert summary[0]["tokens_per_s"] == pytest.approx(5_000)  # first step left out


def test_no_metrics_gives_an_empty_table(tmp_path: Path) -> None:
    run = open_run(write_run(tmp_path / "r", [ev(0, "all_reduce", 0, 10)], world_size=1))
    assert throughput_table(run).num_rows == 0


def _scaled_run(path: Path, scale: float) -> Path:
    events: list[dict[str, Any]] = []
    for step in range(3):
        b = step * 10_000 * scale
        for r in (0, 1):
            events.append(
                ev(r, "all_reduce", b + 1000 * scale, b + 5000 * scale, step=step, size=1 << 20)
            )
            events.append(ev(r, "broadcast", b + 6000 * scale, b + 7000 * scale, step=step))
    steps = {r: [(s * 10_000 * scale, (s + 1) * 10_000 * scale) for s in range(3)] for r in (0, 1)}
    return write_run(path, events, world_size=2, steps=steps)


def test_compare_speedup_relative_to_first(tmp_path: Path) -> None:
    slow = open_run(_scaled_run(tmp_path / "a" / "run", 1.0))
    fast = open_run(_scaled_run(tmp_path / "b" / "run", 0.5))
    summary = compare_summary([slow, fast]).to_pylist()
    assert [r["run"] for r in summary] == ["0:run", "1:run"] == run_labels([slow, fast])
    assert summary[0]["step_s"] == pytest.approx(0.01)
    assert summary[1]["step_s"] == pytest.approx(0.005)
    assert summary[0]["speedup"] == pytest.approx(1.0)
    assert summary[1]["speedup"] == pytest.approx(2.0)
    assert summary[0]["comm_share"] == pytest.approx(0.5)
    assert summary[0]["steps"] == 2  # the first step is left out
    ops = {(r["run"], r["op"]): r for r in compare_ops([slow, fast]).to_pylist()}
    assert ops[("1:run", "all_reduce")]["speedup"] == pytest.approx(2.0)
    assert ops[("0:run", "all_reduce")]["bytes"] == 6 * (1 << 20)
    assert ops[("1:run", "broadcast")]["time_s"] == pytest.approx(6 * 0.5e-3)
