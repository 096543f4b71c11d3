"""The timeline's lanes: representative steps, a lane per rank up to 8, per node beyond."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from commlens.analysis.lanes import lanes, representative_steps
from commlens.trace.reader import open_run
from commlens.trace.synthetic import ev, write_run


def test_the_steps_drawn_are_consecutive_around_the_median_one() -> None:
    times = {0: 0.9, 1: 0.02, 2: 0.03, 3: 0.021, 4: 0.025, 5: 0.5}
    table = pa.table({"step": list(times), "step_s": list(times.values())})
    assert representative_steps(table) == [3, 4, 5]  # median 0.025 is step 4
    assert representative_steps(table.slice(0, 2)) == [0, 1]
    assert representative_steps(table.slice(0, 0)) == []


def _run(tmp: Path, world: int, per_node: int | None) -> Path:
    events, steps = [], {}
    for r in range(world):
        steps[r] = [(s * 1000.0, s * 1000.0 + 900) for s in range(4)]
        for s in range(4):
            t = s * 1000.0
            events.append(
                ev(
                    r,
                    "all_reduce",
                    t + 500,
                    t + 600,
                    pg_ranks=list(range(world)),
                    step=s,
                    role="dp",
                )
            )
    meta = {r: {"launch": {"node": str(r // per_node)}} for r in range(world)} if per_node else None
    return write_run(tmp, events, world_size=world, steps=steps, rank_meta=meta)


def test_a_lane_per_rank_up_to_eight_then_per_node(tmp_path: Path) -> None:
    small = lanes(open_run(_run(tmp_path / "a", 4, None)), [1, 2])
    assert small is not None and small.by == "rank" and small.labels[0] == "rank 0"
    assert small.ops.num_rows == 4 * 2
    # times from the first drawn step's start: step 1's op at 0.5 ms
    assert min(small.ops.column("start_s").to_pylist()) == 0.0005
    big = lanes(open_run(_run(tmp_path / "b", 16, 4)), [1])
    assert big is not None and big.by == "node"
    assert big.labels == [f"node {n} (ranks {4 * n}-{4 * n + 3})" for n in range(4)]
    assert big.ranks_per_lane == [4, 4, 4, 4]
    blocks = lanes(open_run(_run(tmp_path / "c", 40, None)), [1])
    assert blocks is not None and blocks.by == "ranks" and len(blocks.labels) <= 16
    assert sum(blocks.ranks_per_lane) == 40


def test_a_lane_of_many_ranks_is_drawn_as_the_share_of_them_in_a_call() -> None:
    """Two of a lane's four ranks in a call over the first half: the share is 0.5 there,
    0 after."""
    import numpy as np

    from commlens.report.plots import _occupancy

    _, share = _occupancy(np.array([0.0, 0.0]), np.array([5.0, 5.0]), 0.0, 10.0, 4, bins=10)
    assert list(share[:5]) == [0.5] * 5 and not share[6:].any()


def test_a_steps_events_read_from_the_scans_are_the_views(tmp_path: Path) -> None:
    """A 16-rank run on 2 nodes, the second node's clock 40 µs ahead, groups renamed to
    their roles: the events of two steps with roles and clocks applied by column equal
    the events view's, row for row (and a clock moved after opening moves them too)."""
    from commlens.trace.synthetic import Spec, generate

    generate(tmp_path / "run", Spec(tp=2, pp=2, dp=4, steps=4))
    columns = ["rank", "op", "role", "t_issue_ns", "t_end_ns"]
    keys = [("rank", "ascending"), ("t_issue_ns", "ascending"), ("op", "ascending")]
    with open_run(tmp_path / "run") as view:
        assert view.roles and any(c.offset_ns for c in view.clocks.values())
        for moved in ({}, {3: 12_345, 9: -777}):
            view.move_clocks(moved)
            got = view.step_events(columns, [1, 2]).sort_by(keys)
            want = view.sql(
                f"SELECT {', '.join(columns)} FROM events WHERE step IN (1, 2)"
            ).sort_by(keys)
            assert got.num_rows > 100 and got.equals(want)
