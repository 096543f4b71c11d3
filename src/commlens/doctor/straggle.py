"""Who arrives last at a run's collectives, and what it costs the step."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

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


def lateness_by_step(
    groups: dict[str, Any],
    steps: dict[tuple[int, str], np.ndarray],
    arrivals: dict[tuple[int, str], np.ndarray],
) -> dict[int, list[tuple[int, float]]]:
    """Per rank, per step: the mean of its lateness (own arrival - the first member's, on
    rank 0's clock) over the step's collectives that every member of their group issued."""
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for name, group in groups.items():
        members = [r for r in group.ranks if (r, name) in arrivals]
        if len(members) < 2 or len(members) < len(group.ranks):
            continue
        n = min(arrivals[(r, name)].size for r in members)
        at = np.stack([arrivals[(r, name)][:n] for r in members])
        late = at - at.min(axis=0)
        for i, r in enumerate(members):
            step = steps[(r, name)][:n]
            kept = step >= 0
            parts.setdefault(r, []).append((step[kept], late[i][kept] / 1e9))
    out: dict[int, list[tuple[int, float]]] = {}
    for rank in sorted(parts):
        step = np.concatenate([s for s, _ in parts[rank]]).astype(np.int64)
        if not step.size:
            continue
        # summed in the order of the groups and their collectives, as one would by hand
        total = np.bincount(step, weights=np.concatenate([v for _, v in parts[rank]]))
        count = np.bincount(step).astype(np.float64)
        out[rank] = [(int(s), float(total[s] / count[s])) for s in np.flatnonzero(count)]
    return out


def trend(series: list[tuple[int, float]]) -> str:
    """'drifting: ...' when the lateness of the last third of the steps is more than twice
    the first third's and grew step after step more often than not; else 'steady: ...'."""
    if len(series) < 3:
        return ""
    values = [v for _, v in series]
    third = max(1, len(values) // 3)
    first, last = float(np.mean(values[:third])), float(np.mean(values[-third:]))
    rises = sum(b > a for a, b in itertools.pairwise(values))
    if last > 2 * first and rises > (len(values) - 1) / 2:
        return (
            f"drifting: late by {first * 1e3:.1f} ms a collective in its first steps, "
            f"{last * 1e3:.1f} ms in its last"
        )
    return f"steady: late by {float(np.median(values)) * 1e3:.1f} ms a collective, step after step"
