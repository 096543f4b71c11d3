"""Events outside the job's steps are their own rows; the headline leaves them out."""

from __future__ import annotations

from pathlib import Path

from commlens.analysis import open_run, rank_summary, step_summary, step_table
from commlens.analysis.compare import compare_summary
from commlens.report.build import build_report
from commlens.trace.synthetic import ev, write_run


def _run(tmp_path: Path) -> Path:
    """Steps 1 and 2 recorded; step 0 holds set-up traffic, step 3 the tail after the last."""
    events = [
        ev(r, "all_reduce", s * 1000 + 10, s * 1000 + 110, step=s) for r in (0, 1) for s in range(4)
    ]
    windows = {r: [(0, 1), (1000, 2000), (2000, 3000)] for r in (0, 1)}
    run = write_run(tmp_path / "run", events, world_size=2, steps=windows)
    return run


def test_setup_and_tail_rows_are_their_own(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with open_run(run) as view:
        per_rank = step_table(view)
        kinds = {r["step"]: r["kind"] for r in step_summary(per_rank).to_pylist()}
        assert kinds == {0: "step", 1: "step", 2: "step", 3: "after last step"}
        ranks = rank_summary(per_rank).to_pylist()
        assert [r["ops"] for r in ranks] == [3, 3]  # the tail's op is not summed in
        doc = build_report(view)
    assert doc.data["headline_steps"] == [1, 3]
    assert "Rows 3 (after last step) hold events outside" in doc.sections[1].note
    assert compare_summary([run]).to_pylist()[0]["steps"] == 2  # steps 1, 2 (0: warm-up)
