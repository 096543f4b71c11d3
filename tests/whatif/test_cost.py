"""What ``whatif`` keeps in memory: columns freed once read for the last time, answers unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.report.whatif import build_whatif_document
from commlens.trace.synthetic import Spec, generate
from commlens.whatif import builders, study
from commlens.whatif.model import CAPTURED_TIMES

SHAPE = Spec(tp=2, pp=2, dp=2, microbatches=2, layers=1, steps=4)
"""8 ranks (2 emulated nodes' worth), tensor, pipeline and data parallel, stragglers and
clock offsets planted: every kind of op and queue the replay holds."""

ASKED = {
    "fit": {},
    "model": {},
    "delta": {"captured_net": "loopback"},
    "fit, 2 nodes": {"nodes": 2},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cost") / "run"
    generate(out, SHAPE)
    return out


@pytest.mark.parametrize("asked", list(ASKED))
def test_the_networks_replays_need_no_captured_times(
    run: Path, asked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trace's captured times are freed once the self-check and the builder of op
    times have read them; the answers are those of a study that keeps them."""
    op_times = asked.split(",")[0]
    kwargs = {"op_times": op_times, **ASKED[asked]}
    nets = "tcp-10g,200mbit"
    released = study.run_study(run, nets, **kwargs)  # type: ignore[arg-type]
    for name in CAPTURED_TIMES:
        assert getattr(released.trace, name).size == 0, name
    with monkeypatch.context() as m:
        m.setattr(study, "release_captured_times", lambda trace: None)
        m.setattr(builders, "release_captured_times", lambda trace: None)
        kept = study.run_study(run, nets, **kwargs)  # type: ignore[arg-type]
    assert getattr(kept.trace, CAPTURED_TIMES[0]).size == kept.trace.events
    assert build_whatif_document(released).data == build_whatif_document(kept).data
