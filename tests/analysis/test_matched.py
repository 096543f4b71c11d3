"""The matched-run layer: one matching rule, queue starts, unions and exposure, the clock
check; what ``report`` and ``whatif`` read of one run is the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from commlens.analysis import open_run, rank_pass, skew_table, step_table
from commlens.analysis.matched.intervals import cover, exposure
from commlens.analysis.matched.match import agreement, numbering, positions
from commlens.analysis.matched.ops import read_ops
from commlens.analysis.matched.queues import (
    instance_starts,
    latency_split,
    queue_service,
    running_max,
    service_starts,
)
from commlens.analysis.matched.run import check_clocks, match_run
from commlens.analysis.skew import matched_events
from commlens.errors import RunFormatError
from commlens.trace.synthetic import T0_NS, US, ev, write_run
from commlens.whatif.model import build_program
from commlens.whatif.source import read_trace
from commlens.whatif.study import self_check

STEPS = {r: [(0.0, 1000.0), (1000.0, 2000.0)] for r in range(2)}


def _run(tmp_path: Path, events: list[dict[str, Any]], **kw: Any) -> Path:
    return write_run(tmp_path / "run", events, world_size=2, steps=STEPS, **kw)


def test_positions_and_numbering_give_each_groups_kth_call_one_id() -> None:
    pos, order = positions(np.array([5, 3, 5, 5, 3]))
    assert pos.tolist() == [0, 0, 1, 2, 1] and order.tolist() == [1, 4, 0, 2, 3]
    number = numbering({7: 2, 3: 3})  # group 3 first: ids 0..2, then group 7: 3..4
    assert number.ids(np.array([7, 3, 7]), np.array([1, 2, 0])).tolist() == [4, 2, 3]
    assert number.total == 5 and number.group_of(np.array([0, 2, 3, 4])).tolist() == [0, 0, 1, 1]
    seen, agrees = agreement(
        [np.array([0, 1]), np.array([1, 0])], [np.array([2, 2]), np.array([2, 9])], 3
    )
    assert seen.tolist() == [2, 2, 0] and agrees.tolist() == [False, True, True]


def test_report_and_whatif_match_collectives_by_one_rule(tmp_path: Path) -> None:
    # group "0": the k-th collective on a group is one instance whatever its op; a
    # send/recv on the same group is no collective and shifts no position
    events = []
    for r in range(2):
        events += [
            ev(r, "all_reduce", 10, 20, step=0),
            ev(r, "send" if r == 0 else "recv", 30, 40, peer=1 - r, step=0),
            ev(r, "broadcast", 50 + r, 60, step=0, peer=0),
            ev(r, "all_reduce", 1010, 1020, step=1),
        ]
    run = _run(tmp_path, events)
    ops = read_ops(run)
    m = match_run(ops)
    coll = m.send_of < 0
    assert m.instances == 4 and int(coll.sum()) == 3
    by_event = {
        (int(ops.rank[e]), ops.op_names[int(ops.op[e])], int(ops.step[e])): int(m.inst[e])
        for e in range(ops.events)
    }
    for key in [("all_reduce", 0), ("broadcast", 0), ("all_reduce", 1)]:
        assert by_event[(0, *key)] == by_event[(1, *key)]
    table = matched_events(rank_pass(run, match=True))
    k = {(row["rank"], row["op"], row["step"]): row["k"] for row in table.to_pylist()}
    # report numbers the same calls: the k-th collective on the group (from 1)
    assert k == {
        (r, op, s): i + 1
        for r in range(2)
        for i, (op, s) in enumerate([("all_reduce", 0), ("broadcast", 0), ("all_reduce", 1)])
    }


def test_members_that_disagree_on_the_op_are_left_out_by_report_and_refused_by_whatif(
    tmp_path: Path,
) -> None:
    events = [
        ev(0, "all_reduce", 10, 20), ev(0, "broadcast", 30, 40, peer=0),
        ev(1, "broadcast", 10, 20, peer=0), ev(1, "all_reduce", 30, 40),
        ev(0, "all_gather", 50, 60), ev(1, "all_gather", 50, 60),
    ]  # fmt: skip
    run = _run(tmp_path, events)
    skew = skew_table(rank_pass(run, match=True))
    assert skew.column("op").to_pylist() == ["all_gather"]  # positions 1, 2 disagree
    with pytest.raises(RunFormatError, match="all_reduce on one rank and broadcast on another"):
        build_program(read_trace(run))


def test_queue_starts_follow_one_rule() -> None:
    # one server: start = max(issue, latest end of the group's earlier ops)
    group = np.array([0, 0, 1, 0])
    s, e = np.array([0, 5, 6, 30]), np.array([20, 25, 9, 40])
    start, service = queue_service(group, s, e)
    assert start.tolist() == [0, 20, 6, 30] and service.tolist() == [20, 5, 3, 10]
    # instances: ready at the last member's issue, free at the first member's end
    start, release = instance_starts(
        np.array([10, 12, 50]), np.array([30, 20, 60]), np.array([True, False, False])
    )
    assert start.tolist() == [10, 30, 50] and release.tolist() == [30, 30, 60]
    assert running_max(
        np.array([3, 1, 4, 0, 2]), np.array([True, False, False, True, False])
    ).tolist() == [3, 3, 4, 0, 2]
    # a start the trace recorded (a kernel's on its stream) is the start
    recorded = np.array([np.iinfo(np.int64).min, 22, np.iinfo(np.int64).min, 35])
    start, service = service_starts(group, s, e, recorded)
    assert start.tolist() == [0, 22, 6, 35] and service.tolist() == [20, 3, 3, 5]


def test_exposure_is_the_union_of_held_spans_in_the_step_window() -> None:
    step = np.array([0, 0, 0, 1])
    s, e = np.array([0, 5, 40, 95]), np.array([20, 30, 50, 130])
    held = np.array([20, 5, 0, 30])  # [0,20], [25,30], none, [100,130]
    windows = (np.array([0, 1]), np.array([0, 100]), np.array([100, 120]))
    steps, comm, exposed = exposure(step, s, e, held, windows)
    assert steps.tolist() == [0, 1] and comm.tolist() == [40, 20] and exposed.tolist() == [25, 20]
    keys, covered = cover(np.array([1, 0, 1]), np.array([0.0, 1.0, 0.5]), np.array([1.0, 2.0, 2.0]))
    assert keys.tolist() == [0, 1] and covered.tolist() == [1.0, 2.0]


def test_whatif_replay_of_the_capture_exposes_what_report_does(tmp_path: Path) -> None:
    events = []
    for r in range(2):
        for step, t0 in ((0, 0), (1, 1000)):
            events += [
                ev(r, "all_reduce", t0 + 100 + 10 * r, t0 + 300, step=step),  # blocking
                ev(r, "all_gather", t0 + 400, t0 + 700, step=step, is_async=True, wait_us=150),
                ev(r, "broadcast", t0 + 650, t0 + 800 + r, step=step, is_async=True, wait_us=80),
            ]
        # issued in step 0, waited in step 1's window: held there, no part of step 0's time
        events.append(ev(r, "reduce_scatter", 850, 1080, step=0, is_async=True, wait_us=50))
    run = _run(tmp_path, events)
    report = step_table(rank_pass(run)).to_pylist()
    per_step = [np.mean([row["exposed_s"] for row in report if row["step"] == s]) for s in (0, 1)]
    assert per_step == pytest.approx([425e-6, 425e-6])
    _, answer = self_check(build_program(read_trace(run)), [0, 1])
    assert answer.figures.exposed_s == pytest.approx(float(np.median(per_step)), rel=1e-9)


def test_the_clock_check_moves_report_and_whatif_times_alike(tmp_path: Path) -> None:
    events = []
    for r in range(2):
        late = 0 if r == 0 else -400  # rank 1's clock reads 400 us early: its ops end first
        for step, t0 in ((0, 0), (1, 1000)):
            events += [ev(r, "all_reduce", t0 + 300 + late, t0 + 350 + late, step=step)]
    steps = {0: STEPS[0], 1: [(a - 400, b - 400) for a, b in STEPS[1]]}
    run = write_run(tmp_path / "run", events, world_size=2, steps=steps)
    prog = build_program(read_trace(run))
    shift = int(prog.clock_shifts[1])
    assert shift > 0 and prog.clock_shifts[0] == 0
    with open_run(run) as view:
        assert check_clocks(view) == {1: shift}
        rp = rank_pass(view)
        assert any("rank 1: clock moved by" in w for w in view.warnings)
        first = view.sql("SELECT min(t_issue_ns) AS t FROM events WHERE rank = 1").column(0)[0]
    assert first.as_py() == T0_NS + round(-100 * US) + shift  # the event as whatif times it
    assert int(prog.trace.t_issue[prog.trace.rank == 1].min()) == first.as_py()
    windows = rp.windows.filter(rp.windows.column("rank").to_numpy() == 1)
    assert windows.column("t_start_ns").to_pylist()[0] == int(
        prog.trace.step_start[prog.trace.step_rank == 1][0]
    )
    # a run whose clocks respect causality is left as read
    consistent = write_run(
        tmp_path / "ok",
        [ev(r, "all_reduce", 300, 350) for r in range(2)],
        world_size=2,
        steps=STEPS,
    )
    with open_run(consistent) as view:
        assert check_clocks(view) == {} and view.shifts == {}


def test_an_ops_wait_and_service_add_up_to_its_time_in_report_and_whatif(tmp_path: Path) -> None:
    queued, wait, transfer, clamped = latency_split(
        np.array([100, 100, 100]), np.array([80, 80, 80]), np.array([-5, 30, 95])
    )
    assert queued.tolist() == [20] * 3 and wait.tolist() == [0, 30, 80]
    assert transfer.tolist() == [80, 50, 0] and clamped.tolist() == [False, False, True]
    # an eager send: its pair starts at the send's issue, before the receive was issued
    events = []
    for step, t0 in ((0, 0), (1, 1000)):
        events += [
            ev(0, "send", t0 + 100, t0 + 150, peer=1, step=step),
            ev(1, "recv", t0 + 200, t0 + 260, peer=0, step=step),
        ]
    _, answer = self_check(build_program(read_trace(_run(tmp_path, events))), [0, 1])
    for row in answer.figures.ops:
        assert row.wait_s + row.service_s == pytest.approx(row.time_s), row
    recv = next(r for r in answer.figures.ops if r.op == "recv")
    assert recv.wait_s == 0 and recv.service_s == pytest.approx(60e-6 / 2)  # per rank


def _random_ops(rng: np.random.Generator, moved: bool) -> Any:
    """Six ranks: five rounds of an all-reduce on each of two groups, a broadcast from
    rank 0 to all, a send 1 -> 4; each rank's clock moved by up to 300 ns when ``moved``."""
    from commlens.analysis.matched.ops import RunOps

    w, rows = 6, []
    skew = rng.integers(-300, 300, w) if moved else np.zeros(w, np.int64)
    groups = [(0, 1, 2), (3, 4, 5)]
    for k in range(5):
        t = 1000 * k
        for g, members in enumerate(groups):
            for r in members:
                rows.append((r, 0, g, -1, t + rng.integers(0, 50), t + 400 + rng.integers(0, 50)))
        for r in range(w):
            rows.append((r, 2, 2, 0, t + 500, t + 700 + rng.integers(0, 50)))
        rows.append((1, 1, 3, 4, t + 800, t + 850))
        rows.append((4, 3, 3, 1, t + 790, t + 900))
    a = np.array(sorted(rows, key=lambda x: (x[0], x[4])), np.int64)
    n = len(a)
    return RunOps(
        name="r", world_size=w, rank=a[:, 0].astype(np.int32), op=a[:, 1].astype(np.int32),
        op_names=["all_reduce", "send", "broadcast", "recv"], group=a[:, 2].astype(np.int32),
        group_names=["a", "b", "w", "p"], groups=[*groups, tuple(range(w)), tuple(range(w))],
        role=np.zeros(n, np.int32), role_names=[""], size_bytes=np.ones(n, np.int64),
        peer=a[:, 3].astype(np.int32), is_async=np.zeros(n, bool),
        t_issue=a[:, 4] + skew[a[:, 0]], t_end=a[:, 5] + skew[a[:, 0]],
        t_wait=np.zeros(n, np.int64), step=np.zeros(n, np.int32),
        step_rank=np.zeros(0, np.int64), step_index=np.zeros(0, np.int64),
        step_start=np.zeros(0, np.int64), step_end=np.zeros(0, np.int64),
    )  # fmt: skip


def test_the_clock_check_skips_the_pairs_only_where_no_pair_is_out_of_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random runs, clocks moved or not: the shifts equal those found from every pair's
    bound, and the collectives' pairs are left uncomputed exactly where none of them is
    below 0 (every member of every instance ended after every member issued it)."""
    from commlens.analysis.matched import clocks

    full, pairs, paired = clocks._bounds, clocks._pair_bounds, []

    def counted(*args: Any) -> None:
        paired.append(True)
        pairs(*args)

    rng = np.random.default_rng(3)
    skipped = 0
    for trial in range(40):
        seed = int(rng.integers(1 << 30))
        paired.clear()
        monkeypatch.setattr(clocks, "_pair_bounds", counted)
        fast = match_run(_random_ops(np.random.default_rng(seed), trial % 2 == 1)).clock_shifts
        monkeypatch.undo()
        monkeypatch.setattr(clocks, "_collectives_in_order", lambda *a: False)
        slow = match_run(_random_ops(np.random.default_rng(seed), trial % 2 == 1)).clock_shifts
        monkeypatch.undo()
        assert fast.tolist() == slow.tolist()
        ops = _random_ops(np.random.default_rng(seed), trial % 2 == 1)
        m = match_run(ops) if not fast.any() else None
        if m is not None:
            pairs_ok = bool((full(ops, m.inst, m.members, m.send_of, m.recv_of) >= 0).all())
            assert (True not in paired) == pairs_ok
            skipped += pairs_ok
    assert 5 < skipped < 40
