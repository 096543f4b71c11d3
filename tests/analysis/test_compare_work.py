"""compare's speedups put like with like: time per token (or sample) when the manifests say."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.analysis.compare import compare_summary, work_note, work_per_step
from commlens.trace.synthetic import ev, write_run


def _run(path: Path, step_us: float, workload: dict[str, object] | None) -> Path:
    events = [
        ev(r, "all_reduce", s * step_us, s * step_us + 100, step=s)
        for r in (0, 1)
        for s in (0, 1, 2)
    ]
    steps = {r: [(s * step_us, (s + 1) * step_us) for s in range(3)] for r in (0, 1)}
    extra = {"workload": workload} if workload is not None else {}
    return write_run(path, events, world_size=2, steps=steps, extra=extra)


def _workload(dp: int) -> dict[str, object]:
    return {
        "model": "m",
        "scheme": "dp",
        "dims": {"dp": dp},
        "seq_len": 128,
        "micro_batch": 2,
        "microbatches": 1,
    }


def test_work_per_step_from_the_workload() -> None:
    assert work_per_step({"workload": _workload(4)}) == {
        "tokens_per_step": 4 * 2 * 128,
        "samples_per_step": 8,
    }
    assert work_per_step({"workload": {"tokens_per_step": 10}})["tokens_per_step"] == 10
    assert work_per_step({}) == {"tokens_per_step": None, "samples_per_step": None}


def test_speedup_is_per_token_when_the_work_differs(tmp_path: Path) -> None:
    dp = _run(tmp_path / "dp", 10_000, _workload(4))  # 4x the tokens in 2x the time
    tp = _run(tmp_path / "tp", 5_000, _workload(1))
    summary = compare_summary([dp, tp])
    rows = summary.to_pylist()
    assert [r["speedup_basis"] for r in rows] == ["token", "token"]
    assert rows[1]["speedup"] == pytest.approx(0.5)  # not 2x: tp takes 2x the time per token
    assert rows[0]["time_per_unit_s"] == pytest.approx(0.01 / 1024)
    assert "ratio of time per token (the runs processed different tokens per step)" in work_note(
        summary
    )


def test_unknown_work_is_said_plainly(tmp_path: Path) -> None:
    summary = compare_summary(
        [_run(tmp_path / "a", 10_000, None), _run(tmp_path / "b", 5_000, None)]
    )
    assert summary.column("speedup").to_pylist()[1] == pytest.approx(2.0)
    assert summary.column("speedup_basis").to_pylist() == ["step (work unknown)"] * 2
    assert "may have done different amounts of work" in work_note(summary)
