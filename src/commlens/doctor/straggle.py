"""Who arrives last at a run's collectives, and what it costs the step."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def straggle_rows(
    run_dir: Path, steps: dict[int, list[tuple[int, int, int]]]
) -> list[dict[str, float]]:
    """Per rank, over the steps (set-up left out: ranks start apart): collectives
    matched, how often it arrived last, the others' wait for it per step (``blame_s``
    over the steps the run recorded) and the median step time."""
    from commlens.analysis.skew import straggler_table
    from commlens.trace.reader import open_run

    with open_run(run_dir, steps=(0, None)) as view:  # set-up (step -1) left out
        table = straggler_table(view)
    durations = [
        (end - start) / 1e9
        for windows in steps.values()
        for step, start, end in windows
        if step >= 0
    ]
    n_steps = max((len([w for w in ws if w[0] >= 0]) for ws in steps.values()), default=0)
    step_s = float(np.median(durations)) if durations else 0.0
    rows = []
    for row in table.to_pylist():
        blame = float(row["blame_s"])
        rows.append(
            {
                "rank": float(row["rank"]),
                "instances": float(row["instances"]),
                "last_count": float(row["last_count"]),
                "blame_s": blame,
                "blame_per_step_s": blame / n_steps if n_steps else 0.0,
                "step_s": step_s,
            }
        )
    return rows
