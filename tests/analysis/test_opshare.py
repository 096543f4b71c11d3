"""Each op's share of the step: parts of the communication that add up, never past it.

DDP's buckets queue on one group: issued together, the k-th ends after k
transfers, so their call times add up to 1 + 2 + 3 = 6 transfers in a step of
4 (a share of 150% when a share was time in calls over the step); their part
of the step is the 3 transfers they cover. An op running beside them shares
each moment with them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.analysis import open_run, step_table
from commlens.analysis.opshare import op_parts
from commlens.trace.synthetic import ev, write_run


def _run(tmp_path: Path) -> Path:
    events = []
    for rank in (0, 1):
        events += [  # three buckets issued at 0, served one after the other: 1000 us each
            ev(rank, "all_reduce", 0, 1000, is_async=True, role="dp", wait_us=0),
            ev(rank, "all_reduce", 0, 2000, is_async=True, role="dp", wait_us=0),
            ev(rank, "all_reduce", 0, 3000, is_async=True, role="dp", wait_us=1000),
            ev(rank, "broadcast", 2500, 3500, role="dp"),  # beside the last bucket
            ev(rank, "all_gather", -500, 200, role="dp"),  # half before the window
        ]
    steps = {0: [(0, 4000)], 1: [(0, 4000)]}
    return write_run(tmp_path / "run", events, world_size=2, steps=steps)


def test_op_shares_are_parts_of_the_communication(tmp_path: Path) -> None:
    with open_run(_run(tmp_path)) as run:
        parts = {(r["op"], r["role"]): r for r in op_parts(run).to_pylist()}
        comm = step_table(run).to_pylist()
    calls = 6 * 1000e-6 / 4000e-6
    assert calls == 1.5  # what the old share (time in calls over the step) said
    comm_share = sum(r["comm_s"] for r in comm) / sum(r["step_s"] for r in comm)
    assert comm_share == pytest.approx(3500 / 4000)  # [0, 3500] covered
    total = sum(p["share"] for p in parts.values())
    assert total == pytest.approx(comm_share, abs=1e-6)  # the parts add up to the union
    bucket = parts[("all_reduce", "dp")]["share"]
    # each moment split among the calls open then: [0, 200] four (three buckets and the
    # all-gather, whose part before the window is no part of the step), [200, 2500] the
    # buckets alone, [2500, 3000] a bucket and the broadcast, [3000, 3500] the broadcast
    assert bucket == pytest.approx((150 + 2300 + 250) / 4000, abs=1e-6)
    assert parts[("broadcast", "dp")]["share"] == pytest.approx(750 / 4000, abs=1e-6)
    assert parts[("all_gather", "dp")]["share"] == pytest.approx(50 / 4000, abs=1e-6)
    assert all(p["ranks"] == 2 for p in parts.values())


def test_steps_outside_the_range_are_left_out(tmp_path: Path) -> None:
    with open_run(_run(tmp_path)) as run:
        assert op_parts(run, 1, None).num_rows == 0
        assert op_parts(run, 0, 1).num_rows == 3
