"""Per-step comm time: union of intervals, exposed vs overlapped time."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.analysis import open_run, rank_summary, step_summary, step_table
from commlens.trace.synthetic import ev, write_run


def test_overlapping_async_ops_are_not_double_counted(tmp_path: Path) -> None:
    events = [
        # two async all-reduces overlapping on [300, 800]: union [100, 1000] = 900 µs
        ev(0, "all_reduce", 100, 800, is_async=True, wait_us=0),
        ev(0, "all_reduce", 300, 1000, is_async=True, wait_us=200),  # waited [800, 1000]
        # a blocking op inside the first one: adds nothing to the union
        ev(0, "broadcast", 200, 400),
        # a separate blocking op: +500 µs
        ev(0, "all_gather", 2000, 2500),
    ]
    for e in list(events):
        events.append({**e, "rank": 1})
    run = open_run(
        write_run(tmp_path / "run", events, world_size=2, steps={0: [(0, 5000)], 1: [(0, 4000)]})
    )
    rows = {r["rank"]: r for r in step_table(run).to_pylist()}
    r0 = rows[0]
    assert r0["step_source"] == "manifest"
    assert r0["step_s"] == pytest.approx(5e-3)
    assert r0["comm_s"] == pytest.approx(1.4e-3)  # 900 + 500, not 700+700+200+500
    assert r0["comm_sum_s"] == pytest.approx(2.1e-3)
    # exposed: broadcast [200,400] + wait [800,1000] + all_gather [2000,2500] = 900 µs
    assert r0["exposed_s"] == pytest.approx(0.9e-3)
    assert r0["overlapped_s"] == pytest.approx(0.5e-3)
    assert r0["comm_share"] == pytest.approx(1.4 / 5)
    assert r0["exposed_share"] == pytest.approx(0.9 / 5)
    assert r0["compute_s"] == pytest.approx(4.1e-3)
    assert rows[1]["step_s"] == pytest.approx(4e-3)
    summary = step_summary(step_table(run)).to_pylist()
    assert len(summary) == 1 and summary[0]["step_s"] == pytest.approx(5e-3)  # slowest rank
    assert summary[0]["comm_s"] == pytest.approx(1.4e-3)
    per_rank = rank_summary(step_table(run)).to_pylist()
    assert [r["rank"] for r in per_rank] == [0, 1]
    assert per_rank[1]["comm_share"] == pytest.approx(1.4 / 4)


def test_steps_without_windows_use_the_span_of_their_ops(tmp_path: Path) -> None:
    events = [
        ev(0, "all_reduce", 0, 100, step=0),
        ev(0, "all_reduce", 400, 500, step=0),
        ev(0, "all_reduce", 1000, 1100, step=1),
    ]
    run = open_run(write_run(tmp_path / "run", events, world_size=1, steps={0: [(0, 900)]}))
    rows = {r["step"]: r for r in step_table(run).to_pylist()}
    assert rows[0]["step_source"] == "manifest" and rows[0]["step_s"] == pytest.approx(9e-4)
    assert rows[1]["step_source"] == "ops" and rows[1]["step_s"] == pytest.approx(1e-4)


def test_step_windows_are_moved_onto_rank0_clock(tmp_path: Path) -> None:
    events = [ev(r, "all_reduce", 100, 200) for r in (0, 1)]
    run = open_run(
        write_run(
            tmp_path / "run",
            events,
            world_size=2,
            steps={0: [(0, 1000)], 1: [(0, 1000)]},
            clock_offset_ns={1: 7_000},
        )
    )
    starts = run.sql("SELECT rank, t_start_ns FROM steps ORDER BY rank").to_pylist()
    assert starts[0]["t_start_ns"] == starts[1]["t_start_ns"]
    issues = run.sql("SELECT t_issue_ns FROM events ORDER BY rank").column(0).to_pylist()
    assert issues[0] == issues[1]
