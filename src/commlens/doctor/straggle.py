"""Who arrives last at a run's collectives, and what it costs the step."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from commlens.analysis.spill import Index


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


LATE = np.dtype([("step", "i8"), ("arrive", "i8")])
"""A collective's step and arrival (on rank 0's clock), as :func:`lateness_by_step` reads
them from the spill the evidence wrote."""


def lateness_by_step(
    groups: dict[str, Any], index: Index, codes: dict[str, int]
) -> dict[int, list[tuple[int, float]]]:
    """Per rank, per step: the mean of its lateness (own arrival - the first member's, on
    rank 0's clock) over the step's collectives that every member of their group issued.
    ``index``: each rank's collectives (:data:`LATE`) spilled by group, the group ``name``
    in chunk ``codes[name]`` (:mod:`commlens.analysis.spill`): read a group at a time."""
    from commlens.analysis.spill import read_one

    total: dict[int, np.ndarray] = {}
    count: dict[int, np.ndarray] = {}
    for name, group in groups.items():
        code = codes.get(name)
        if code is None:
            continue
        found = {r: read_one(index, r, code, LATE) for r in group.ranks}
        calls = {r: rec for r, rec in found.items() if rec is not None}
        members = [r for r in group.ranks if r in calls]
        if len(members) < 2 or len(members) < len(group.ranks):
            continue
        n = min(calls[r].size for r in members)
        at = np.stack([calls[r]["arrive"][:n] for r in members])
        late = at - at.min(axis=0)
        for i, r in enumerate(members):
            step = calls[r]["step"][:n]
            kept = step >= 0
            _add(total, count, r, step[kept], late[i][kept] / 1e9)
    out: dict[int, list[tuple[int, float]]] = {}
    for rank in sorted(total):
        if not count[rank].any():
            continue
        # summed in the order of the groups and their collectives, as one would by hand
        out[rank] = [
            (int(s), float(total[rank][s] / count[rank][s])) for s in np.flatnonzero(count[rank])
        ]
    return out


def _add(
    total: dict[int, np.ndarray], count: dict[int, np.ndarray], rank: int, step: np.ndarray,
    late: np.ndarray,
) -> None:  # fmt: skip
    """Add ``rank``'s lateness ``late`` at ``step`` to its sums (in order, one by one)."""
    size = int(step.max()) + 1 if step.size else 0
    have = total.setdefault(rank, np.zeros(0))
    if size > have.size:
        total[rank] = np.r_[have, np.zeros(size - have.size)]
        count[rank] = np.r_[count.get(rank, np.zeros(0)), np.zeros(size - have.size)]
    count.setdefault(rank, np.zeros(0))
    np.add.at(total[rank], step, late)
    np.add.at(count[rank], step, 1.0)


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
