"""The whatif answer's speedup column: each network against the own-link replay."""

from __future__ import annotations

import pytest

from commlens.predict.networks import network_profile
from commlens.report.whatif import build_whatif_document
from commlens.whatif.results import Figures
from commlens.whatif.study import Answer, Placement, SelfCheck, Study
from tests.whatif.synthetic import Ev, both_steps, make_trace


def answer(name: str, step_s: float, *spread: float) -> Answer:
    """``name``'s answer: one step of ``step_s``, or, with ``spread``, the steps
    ``step_s, *spread``."""
    times = [step_s, *spread]
    figures = Figures(
        steps=list(range(1, len(times) + 1)),
        step_s=times,
        comm_s=0.0,
        exposed_s=0.0,
        overlapped_s=0.0,
    )
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


def test_the_page_leads_with_a_bar_per_network_against_the_measured_step() -> None:
    s = study(answer("unshaped", 1.07, 1.07, 1.07, 1.07))
    s.answers[:] = [answer("1gbit", 1.04, 1.04, 1.04, 1.04), answer("10gbit", 0.5, 0.5, 0.5, 0.5)]
    s.captured = answer("captured", 0.9, 1.0, 1.0, 1.2)  # the measured steps' spread
    doc = build_whatif_document(s)
    assert doc.headline == [doc.highlights[-1]]  # the fastest network first
    assert doc.headline[0].startswith("Fastest network: 10gbit")
    assert doc.lead is not None
    fig = doc.lead[1]()
    ax = fig.axes[0]
    bars = ax.containers[0]
    assert [b.get_height() for b in bars] == pytest.approx([1.04, 0.5])  # one per network
    assert [t.get_text() for t in ax.texts] == [f"{1.07 / 1.04:.2f}x", f"{1.07 / 0.5:.2f}x"]
    lines = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()}
    assert lines["measured 1 s"] == pytest.approx(1.0)
    assert lines["own-link replay 1.07 s"] == pytest.approx(1.07)
    bands = [p for p in ax.patches if p.get_label().startswith("measured")]
    spans = sorted((p.get_label(), round(p.get_y(), 6), round(p.get_height(), 6)) for p in bands)
    assert spans == [("measured min-max", 0.9, 0.3), ("measured quartiles", 0.975, 0.075)]
