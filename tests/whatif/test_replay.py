"""The replay on hand-written event tables, against answers worked out by hand (µs)."""

from __future__ import annotations

import numpy as np
import pytest

from commlens.errors import RunFormatError
from commlens.whatif.critical import critical_path
from commlens.whatif.durations import measured, measured_release
from commlens.whatif.model import BLOCK, BUILD_ONLY, HOLD, Program, build_program
from commlens.whatif.optimes import OpTimes
from commlens.whatif.replay import Timeline, replay
from commlens.whatif.results import figures
from tests.whatif.synthetic import Ev, both_steps, make_trace, us


def self_replay(prog: Program) -> Timeline:
    """The replay with the measured op times and queue releases (the self-check's)."""
    return replay(prog, OpTimes(measured(prog), measured_release(prog)))


def step_times(tl: Timeline) -> np.ndarray:
    return tl.step_marks[1::2] - tl.step_marks[0::2]


def test_collective_waits_for_its_last_member_and_the_step_follows() -> None:
    # rank 0 arrives at 10, rank 1 at 20; both computed 10 after the op in the capture.
    trace = make_trace([Ev(0, "all_reduce", 10, 30), Ev(1, "all_reduce", 20, 30)], both_steps(40))
    prog = build_program(trace)
    assert step_times(self_replay(prog)).tolist() == [us(40), us(40)]
    tl = replay(prog, OpTimes(np.full(2, 5e-6)))
    assert tl.start.tolist() == [us(20)]
    assert tl.end.tolist() == [us(25), us(25)]
    assert tl.held.tolist() == [us(15), us(5)]  # rank 0 waited for rank 1
    assert step_times(tl).tolist() == [us(35), us(35)]
    fig = figures(prog, tl, [0])
    assert fig.step_s == [us(35)]
    assert fig.comm_s == us(10) and fig.exposed_s == us(10)  # means over ranks: (15 + 5) / 2
    assert fig.slowest_rank == 1  # held least: the one the other waited for
    assert [(o.op, o.calls, o.wait_s, o.service_s) for o in fig.ops] == [
        ("all_reduce", 1.0, us(5), us(5))  # waiting (15 + 0) / 2, service 5
    ]


def test_an_op_queues_behind_the_previous_one_on_its_group() -> None:
    events = [
        Ev(0, "all_reduce", 0, 15, is_async=True, wait=5),  # waited from 10
        Ev(0, "all_gather", 1, 25, is_async=True, wait=10),  # waited from 15
        Ev(1, "all_reduce", 5, 15, is_async=True, wait=9),
        Ev(1, "all_gather", 6, 25, is_async=True, wait=10),
    ]
    prog = build_program(make_trace(events, both_steps(30)))
    assert step_times(self_replay(prog)).tolist() == [us(30), us(30)]
    slow = replay(prog, OpTimes(np.full(4, 10e-6)))
    assert slow.start.tolist() == [us(5), us(15)]  # the gather is ready at 6, runs after 15
    fast = replay(prog, OpTimes(np.full(4, 2e-6)))
    assert fast.start.tolist() == [us(5), us(7)]
    # rank 0 computed 9 then 5: nothing left to wait for; rank 1 is held until 7 and 9.
    assert fast.held.tolist() == [0.0, 0.0, us(1), us(2)]
    assert step_times(fast).tolist() == [us(15), us(14)]


def test_async_op_holds_its_caller_only_from_its_wait() -> None:
    events = [Ev(0, "all_reduce", 0, 12, members=(0,), is_async=True, wait=2)]
    prog = build_program(make_trace(events, [(0, 0, 0, 20)]))
    assert step_times(self_replay(prog)).tolist() == [us(20)]
    hidden = replay(prog, OpTimes(np.array([4e-6])))
    assert hidden.held.tolist() == [0.0] and step_times(hidden).tolist() == [us(18)]
    exposed = replay(prog, OpTimes(np.array([15e-6])))
    assert exposed.held.tolist() == [us(5)] and step_times(exposed).tolist() == [us(23)]


def test_sends_meet_their_receives_pair_by_pair() -> None:
    events = [
        Ev(0, "send", 5, 8, peer=1, role="pp"),
        Ev(0, "send", 10, 12, peer=1, role="pp"),
        Ev(1, "recv", 2, 8, peer=0, role="pp"),
        Ev(1, "recv", 9, 12, peer=0, role="pp"),
    ]
    prog = build_program(make_trace(events, both_steps(20)))
    assert prog.inst.tolist() == [0, 1, 0, 1]
    assert prog.cost_groups[int(prog.inst_group[0])] == (0, 1)
    assert step_times(self_replay(prog)).tolist() == [us(20), us(20)]
    tl = replay(prog, OpTimes(np.full(4, 3e-6)))
    assert tl.start.tolist() == [us(5), us(10)]
    assert tl.held.tolist() == [us(3), us(3), us(6), us(4)]
    assert step_times(tl).tolist() == [us(21), us(21)]


def rank0_holds(prog: Program) -> list[tuple[int, float]]:
    """Rank 0's HOLD marks: (the event held for, when in µs from the program's start)."""
    return [
        (a, round(sum(prog.gaps[0][: i + 1]) * 1e6, 6))
        for i, (k, a) in enumerate(zip(prog.mark_types[0], prog.args[0], strict=True))
        if k == HOLD
    ]


def test_unwaited_async_burst_is_waited_at_its_last_issue() -> None:
    # DDP-like: two buckets per rank, no recorded wait; backward blocks until both end.
    events = [
        Ev(0, "all_reduce", 10, 25, is_async=True),
        Ev(0, "all_reduce", 20, 30, is_async=True),
        Ev(1, "all_reduce", 11, 25, is_async=True),
        Ev(1, "all_reduce", 21, 30, is_async=True),
    ]
    prog = build_program(make_trace(events, both_steps(40)))
    holds = rank0_holds(prog)
    assert holds == [(0, 20.0), (1, 20.0)]  # both at the second bucket's issue
    assert step_times(self_replay(prog)).tolist() == [us(40), us(40)]
    tl = replay(prog, OpTimes(np.full(4, 1e-6)))
    assert tl.start.tolist() == [us(11), us(21)]
    assert tl.held.tolist() == [0.0, us(2), 0.0, us(1)]
    assert step_times(tl).tolist() == [us(32), us(32)]


def test_unwaited_buckets_are_waited_with_the_next_bucket_whose_wait_was_seen() -> None:
    # DDP: the first bucket's wait is not recorded, the last one's is (from 25); the
    # backward's compute went on past the first bucket (ended at 14) until the second
    # bucket's issue at 20 and waited for both from 25.
    events = [
        ev
        for r in (0, 1)
        for ev in (
            Ev(r, "all_reduce", 10, 14, is_async=True),
            Ev(r, "all_reduce", 20, 30, is_async=True, wait=5),
        )
    ]
    prog = build_program(make_trace(events, both_steps(40)))
    holds = rank0_holds(prog)
    assert holds == [(0, 25.0), (1, 25.0)]  # both at the second bucket's wait
    assert step_times(self_replay(prog)).tolist() == [us(40), us(40)]
    # a longer first bucket stays hidden under the compute before that wait
    longer = replay(prog, OpTimes(np.array([8e-6, 10e-6, 8e-6, 10e-6])))
    assert longer.held.tolist() == [0.0, us(5), 0.0, us(5)]
    assert step_times(longer).tolist() == [us(40), us(40)]


def test_unwaited_async_op_the_rank_went_past_is_waited_at_its_end() -> None:
    events = [
        Ev(0, "all_reduce", 10, 25, is_async=True),
        Ev(0, "broadcast", 15, 16, group="1", members=(0,)),
        Ev(1, "all_reduce", 10, 25, is_async=True),
    ]
    prog = build_program(make_trace(events, both_steps(40)))
    at = {
        a: round(sum(prog.gaps[0][: i + 1]) * 1e6, 6)
        for i, (k, a) in enumerate(zip(prog.mark_types[0], prog.args[0], strict=True))
        if k in (HOLD, BLOCK)
    }
    # compute before the wait at 25: 25 less the 1 held in the broadcast
    assert at == {0: 24.0, 1: 15.0}
    assert step_times(self_replay(prog)).tolist() == [us(40), us(40)]


def test_desynchronised_ranks_are_refused() -> None:
    events = [Ev(0, "all_reduce", 0, 1), Ev(1, "broadcast", 0, 1)]
    with pytest.raises(RunFormatError, match="all_reduce on one rank and broadcast on another"):
        build_program(make_trace(events, both_steps(2)))
    short = [Ev(0, "all_reduce", 0, 1), Ev(0, "all_reduce", 2, 3), Ev(1, "all_reduce", 0, 1)]
    with pytest.raises(RunFormatError, match=r"different numbers of collectives \(1..2\)"):
        build_program(make_trace(short, both_steps(4)))


def test_a_send_without_its_receive_is_refused() -> None:
    events = [Ev(0, "send", 0, 1, peer=1), Ev(0, "send", 2, 3, peer=1), Ev(1, "recv", 0, 1, peer=0)]
    with pytest.raises(RunFormatError, match="rank 0 sent rank 1 a different number"):
        build_program(make_trace(events, both_steps(4)))


def test_a_send_does_not_wait_for_its_receive() -> None:
    # Each rank sends before it receives: eager sends, no deadlock.
    events = [
        Ev(0, "send", 0, 1, peer=1, role="pp"),
        Ev(0, "recv", 2, 5, peer=1, role="pp"),
        Ev(1, "send", 3, 4, peer=0, role="pp"),
        Ev(1, "recv", 4.5, 5, peer=0, role="pp"),
    ]
    prog = build_program(make_trace(events, both_steps(6)))
    assert step_times(self_replay(prog)).tolist() == [us(6), us(6)]
    tl = replay(prog, OpTimes(np.full(4, 1e-6)))
    assert tl.end.tolist() == [us(1), us(4), us(4), us(4.5)]  # rank 1's data came at 1
    assert step_times(tl).tolist() == [us(5), us(5.5)]


def test_a_clock_that_breaks_causality_is_corrected() -> None:
    # rank 1's clock reads 50 late: its all-reduce seems issued (70) after rank 0's ended (30).
    events = [Ev(0, "all_reduce", 10, 30), Ev(1, "all_reduce", 70, 80)]
    prog = build_program(make_trace(events, [(0, 0, 0, 40), (1, 0, 50, 90)]))
    # δ0 − δ1 must lie in [30 − 70, 80 − 10] negated: [40, 70]; the middle is 55.
    assert prog.clock_shifts.tolist() == [0, -55_000]
    assert prog.trace.t_issue.tolist() == [10_000, 15_000]
    assert step_times(self_replay(prog)).tolist() == [us(40), us(40)]
    consistent = build_program(
        make_trace([Ev(0, "all_reduce", 10, 30), Ev(1, "all_reduce", 20, 30)], both_steps(40))
    )
    assert not consistent.clock_shifts.any()


def test_the_program_takes_its_trace_over_instead_of_copying_it() -> None:
    # a corrected clock moves the trace's own times; what only the build reads is freed
    trace = make_trace(
        [Ev(0, "all_reduce", 10, 30), Ev(1, "all_reduce", 70, 80)], [(0, 0, 0, 40), (1, 0, 50, 90)]
    )
    prog = build_program(trace)
    assert prog.trace is trace
    assert trace.t_issue.tolist() == [10_000, 15_000] and trace.step_start.tolist() == [0, -5_000]
    assert all(getattr(trace, name).size == 0 for name in BUILD_ONLY)
    assert step_times(self_replay(prog)).tolist() == [us(40), us(40)]


def test_critical_path_crosses_to_the_last_arrival() -> None:
    trace = make_trace([Ev(0, "all_reduce", 10, 30), Ev(1, "all_reduce", 20, 30)], both_steps(40))
    prog = build_program(trace)
    path = critical_path(prog, replay(prog, OpTimes(np.full(2, 5e-6))), 0)
    # rank 0's last 10 of compute, the all-reduce's 5, rank 1's first 20 (it came last)
    assert [(p.op, p.seconds) for p in path] == [("compute", us(30)), ("all_reduce", us(5))]
    assert sum(p.share for p in path) == pytest.approx(1.0)


def test_an_op_the_capture_saw_end_before_the_previous_one_does_not_queue() -> None:
    # gloo ran the two async ops side by side: rank 1 finished the second first.
    events = [
        Ev(0, "all_reduce", 0, 20, is_async=True, wait=15),
        Ev(0, "all_reduce", 1, 21, is_async=True, wait=1),
        Ev(1, "all_reduce", 2, 22, is_async=True, wait=17),
        Ev(1, "all_reduce", 3, 12, is_async=True, wait=7),
    ]
    prog = build_program(make_trace(events, both_steps(30)))
    assert prog.first_of_queue.tolist() == [True, True]
    assert step_times(self_replay(prog)).tolist() == [us(30), us(30)]
    assert replay(prog, OpTimes(np.full(4, 10e-6))).start.tolist() == [us(2), us(3)]


def test_a_late_recorded_end_does_not_hold_the_next_op_back() -> None:
    # rank 0 saw A end at 30 (its completion callback waited), rank 1 at 12; rank 1
    # then ran B from 13 to 20: the queue was free when the first member saw A end.
    events = [
        Ev(0, "all_reduce", 0, 30, is_async=True, wait=1),
        Ev(0, "all_reduce", 1, 31, is_async=True, wait=1),
        Ev(1, "all_reduce", 2, 12),
        Ev(1, "all_reduce", 13, 20),
    ]
    prog = build_program(make_trace(events, both_steps(40)))
    assert prog.first_of_queue.tolist() == [True, False]  # in order on every rank
    assert measured_release(prog).tolist() == [us(10), us(7)]
    tl = self_replay(prog)
    assert tl.end.tolist() == [us(30), us(31), us(12), us(20)]
    assert step_times(tl).tolist() == [us(40), us(40)]
