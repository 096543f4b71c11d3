"""The whatif answer's speedup column: each network against the own-link replay."""

from __future__ import annotations

import pytest

from commlens.predict.networks import network_profile
from commlens.report.whatif import build_whatif_document
from commlens.whatif.results import Figures
from commlens.whatif.study import Answer, Placement, SelfCheck, Study
from tests.whatif.synthetic import Ev, both_steps, make_trace


def answer(name: str, step_s: float) -> Answer:
    figures = Figures(steps=[1], step_s=[step_s], comm_s=0.0, exposed_s=0.0, overlapped_s=0.0)
    return Answer(name, None if name == "captured" else network_profile(name), figures)


def study(own: Answer | None) -> Study:
    """Measured 1.00 s a step; the own link's replay (when known) 1.07 s; 1gbit 1.04 s."""
    trace = make_trace([Ev(r, "all_reduce", 0, 10) for r in (0, 1)], both_steps(20))
    return Study(
        trace,
        Placement(1, 2, "loopback", "ring", "test"),
        SelfCheck(0.0, 0.0),
        answer("captured", 1.00),
        [answer("1gbit", 1.04)],
        own_link=own,
    )


def test_a_network_is_compared_with_the_own_link_replay_model_against_model() -> None:
    s = study(answer("unshaped", 1.07))
    assert s.speedup(s.answers[0]) == pytest.approx(1.07 / 1.04)  # a gain, not a loss
    assert s.speedup(s.own_link) == pytest.approx(1.0)  # type: ignore[arg-type]
    doc = build_whatif_document(s)
    table = doc.sections[0]
    assert table.columns[-1].title == "speedup vs own-link replay"
    rows = table.table.to_pylist()
    assert [r["speedup"] for r in rows] == pytest.approx([1.07, 1.0, 1.07 / 1.04])
    assert [r["step"] for r in rows] == pytest.approx([1.00, 1.07, 1.04])  # measured beside
    fastest = doc.highlights[-1]
    assert "1.03x the own-link replay's 1.070000 s (the run measured 1.000000 s a step)" in fastest
    assert doc.data["speedup_against"] == "own_link"
    assert doc.data["networks"][0]["speedup"] == pytest.approx(1.07 / 1.04)  # type: ignore[index]


def test_without_the_own_link_a_network_is_compared_with_the_captured_run() -> None:
    s = study(None)
    assert s.speedup(s.answers[0]) == pytest.approx(1.00 / 1.04)
    doc = build_whatif_document(s)
    assert doc.sections[0].columns[-1].title == "speedup vs captured"
    assert "0.96x the captured 1.000000 s." in doc.highlights[-1]
    assert doc.data["speedup_against"] == "captured"
