"""The self-check on captures a loaded host makes: clocks read off, a root that did not wait."""

from __future__ import annotations

import pytest

from commlens.whatif.model import build_program
from commlens.whatif.study import self_check
from tests.whatif.synthetic import Ev, make_trace

WINDOWS = [(0, 0, 0.0, 400.0), (1, 0, 0.0, 400.0)]


def test_a_broadcast_received_before_its_root_issued_it_corrects_the_clock() -> None:
    # rank 1's clock reads 95 us behind: its broadcast ends (60) before the root issued (100)
    events = [
        Ev(0, "broadcast", 100, 150, peer=0),
        Ev(1, "broadcast", 20, 60, peer=0),
        Ev(0, "all_reduce", 200, 300),
        Ev(1, "all_reduce", 150, 260),
    ]
    prog = build_program(make_trace(events, WINDOWS))
    # the bounds: 40 <= shift of rank 1 <= 150 us (the all-reduce); it takes their middle
    assert prog.clock_shifts.tolist() == [0, 95_000]
    check, _ = self_check(prog, [0])
    assert check.max_step_error == pytest.approx(0, abs=1e-9)
    assert check.max_event_error_s == pytest.approx(0, abs=1e-12)


def test_a_root_that_ended_before_its_last_member_issued_ends_there_in_the_self_check() -> None:
    # gloo's root returns once its 20 bytes are buffered (110), before rank 1 issues (130)
    events = [
        Ev(0, "broadcast", 100, 110, peer=0, size=20),
        Ev(1, "broadcast", 130, 180, peer=0, size=20),
    ]
    prog = build_program(make_trace(events, WINDOWS))
    assert prog.clock_shifts.tolist() == [0, 0]  # no clock is wrong
    check, _ = self_check(prog, [0])
    assert check.max_step_error == pytest.approx(0, abs=1e-9)
    assert check.max_event_error_s == pytest.approx(0, abs=1e-12)
