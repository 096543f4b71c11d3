"""Cross-rank matching with known arrival times: skew, wait for last peer, transfer."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.analysis import (
    matched_events,
    open_run,
    skew_by_step,
    skew_table,
    straggler_table,
)
from commlens.trace.synthetic import ev, write_run

WORLD = [0, 1, 2, 3]
# arrivals (µs) of two all-reduces on the world: rank 2 is the straggler.
ARRIVALS = {0: (0, 1000), 1: (50, 1010), 2: (400, 1600), 3: (100, 1020)}
ENDS = (600, 2000)  # everyone completes together


def _run(tmp_path: Path) -> Path:
    events = []
    for r, (a1, a2) in ARRIVALS.items():
        events.append(ev(r, "all_reduce", a1, ENDS[0], pg_ranks=WORLD, step=0))
        events.append(ev(r, "all_reduce", a2, ENDS[1], pg_ranks=WORLD, step=1))
        events.append(
            ev(
                r,
                "send" if r % 2 == 0 else "recv",
                3000,
                3100,
                pg_ranks=WORLD,
                peer=r + 1 if r % 2 == 0 else r - 1,
            )
        )
    return write_run(tmp_path / "run", events, world_size=4, clock_offset_ns={3: 123_456})


def test_wait_plus_transfer_is_the_measured_latency(tmp_path: Path) -> None:
    run = open_run(_run(tmp_path))
    rows = matched_events(run).to_pylist()
    assert len(rows) == 8  # p2p is not matched
    for row in rows:
        assert row["wait_last_s"] + row["transfer_s"] == pytest.approx(row["duration_s"])
        first, last = (
            min(a[row["k"] - 1] for a in ARRIVALS.values()),
            max(a[row["k"] - 1] for a in ARRIVALS.values()),
        )
        own = ARRIVALS[row["rank"]][row["k"] - 1]
        assert row["skew_s"] == pytest.approx((last - first) / 1e6)
        assert row["wait_last_s"] == pytest.approx((last - own) / 1e6)
        assert row["transfer_s"] == pytest.approx((ENDS[row["k"] - 1] - last) / 1e6)
        assert row["last_rank"] == 2


def test_skew_table_and_stragglers(tmp_path: Path) -> None:
    run = open_run(_run(tmp_path))
    (row,) = skew_table(run).to_pylist()
    assert row["instances"] == 2
    assert row["mean_skew_s"] == pytest.approx((400e-6 + 600e-6) / 2)
    assert row["max_skew_s"] == pytest.approx(600e-6)
    wait = sum(400 - a for a, _ in ARRIVALS.values()) + sum(1600 - b for _, b in ARRIVALS.values())
    assert row["wait_s"] == pytest.approx(wait / 1e6)
    transfer = 4 * (600 - 400) + 4 * (2000 - 1600)
    assert row["transfer_s"] == pytest.approx(transfer / 1e6)
    assert row["wait_s"] + row["transfer_s"] == pytest.approx(row["time_s"])
    stragglers = straggler_table(run).to_pylist()
    assert stragglers[0]["rank"] == 2 and stragglers[0]["straggler_rank"] == 1
    assert stragglers[0]["last_count"] == 2
    assert stragglers[0]["blame_s"] == pytest.approx(1000e-6)
    assert stragglers[0]["wait_s"] == pytest.approx(0.0)
    assert {r["rank"] for r in stragglers} == set(WORLD)
    by_step = {r["step"]: r for r in skew_by_step(run).to_pylist()}
    assert by_step[1]["max_skew_s"] == pytest.approx(600e-6)


def test_missing_rank_excludes_its_groups(tmp_path: Path) -> None:
    path = _run(tmp_path)
    # a sub-group that does not include rank 3
    (path / "rank-00003.parquet").unlink()
    run = open_run(path)
    assert run.missing_ranks == [3]
    assert matched_events(run).num_rows == 0  # every collective was on the world group
    assert straggler_table(run).num_rows == 0


def test_incomplete_instances_are_left_out(tmp_path: Path) -> None:
    events = [ev(r, "all_reduce", 0, 100, pg_ranks=[0, 1]) for r in (0, 1)]
    events.append(ev(0, "all_reduce", 200, 300, pg_ranks=[0, 1]))  # rank 1 never recorded it
    run = open_run(write_run(tmp_path / "run", events, world_size=2))
    assert matched_events(run).num_rows == 2
