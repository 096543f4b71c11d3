"""Figures of one replayed timeline: steps, communication, exposure, ops, ranks.

Definitions follow ``commlens report`` (:mod:`commlens.analysis.steps`):

- a step's time is that of its slowest rank (end − start of its step marks);
- a rank's communication in a step is the union of ``[issue, end]`` of the
  step's ops on it, its *exposed* part the union of the spans it was held
  (blocked in the call, or in ``wait()``), both cut to the rank's window of that
  step (:func:`commlens.analysis.matched.intervals.exposure`, as ``report``'s),
  the rest *overlapped* with compute;
- per op: *time* is issue → end on the rank, of which *waiting* is issue →
  start (peers not yet there, or the group busy with the op before it) and
  *service* start → end (the op's own transfer), split as ``report`` splits
  a call (:func:`commlens.analysis.matched.queues.latency_split`: each within
  the op's time, so they add up to it).

Figures per step are means over ranks, then medians over the steps kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commlens.analysis.matched.intervals import Windows, exposure
from commlens.analysis.matched.queues import latency_split
from commlens.whatif.critical import PathShare, critical_path
from commlens.whatif.model import Program
from commlens.whatif.replay import Timeline
from commlens.whatif.source import Trace


@dataclass
class OpRow:
    op: str
    role: str
    calls: float
    """Calls per step per rank."""
    bytes: float
    """Message bytes (S) per step per rank."""
    time_s: float
    """Issue → end per step per rank."""
    service_s: float
    wait_s: float
    exposed_s: float


@dataclass
class Figures:
    """What a replay says about the steps kept."""

    steps: list[int]
    step_s: list[float]
    """Time of each kept step (its slowest rank)."""
    comm_s: float
    """Median over steps of the mean over ranks of communication time."""
    exposed_s: float
    overlapped_s: float
    ops: list[OpRow] = field(default_factory=list)
    slowest_rank: int = 0
    """The rank the others wait for most: the least held."""
    slowest_held_s: float = 0.0
    median_held_s: float = 0.0
    critical: list[PathShare] = field(default_factory=list)
    """The critical path of the last step kept, per (op, role), compute first."""

    @property
    def median_step_s(self) -> float:
        return float(np.median(self.step_s)) if self.step_s else 0.0

    @property
    def comm_share(self) -> float:
        step = self.median_step_s
        return self.comm_s / step if step > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "step_s": self.step_s,
            "median_step_s": self.median_step_s,
            "comm_s": self.comm_s,
            "comm_share": self.comm_share,
            "exposed_s": self.exposed_s,
            "overlapped_s": self.overlapped_s,
            "slowest_rank": self.slowest_rank,
            "slowest_rank_held_s": self.slowest_held_s,
            "median_rank_held_s": self.median_held_s,
            "ops": [vars(o) for o in self.ops],
            "critical_path_last_step": [vars(p) for p in self.critical],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figures:
        """The figures :meth:`to_dict` wrote (a whatif JSON answer); KeyError,
        TypeError or ValueError when ``data`` is not one (its steps and their
        times must pair up, at least one of each)."""
        figures = cls(
            steps=[int(s) for s in data["steps"]],
            step_s=[float(s) for s in data["step_s"]],
            comm_s=float(data["comm_s"]),
            exposed_s=float(data["exposed_s"]),
            overlapped_s=float(data["overlapped_s"]),
            ops=[OpRow(**o) for o in data["ops"]],
            slowest_rank=int(data["slowest_rank"]),
            slowest_held_s=float(data["slowest_rank_held_s"]),
            median_held_s=float(data["median_rank_held_s"]),
            critical=[PathShare(**p) for p in data["critical_path_last_step"]],
        )
        if not figures.steps or len(figures.steps) != len(figures.step_s):
            raise ValueError("no steps, or steps and step times that do not pair up")
        return figures


OP_FIELDS = ("calls", "bytes", "time", "service", "wait", "exposed")
"""What :func:`figures` sums per (op, role), in this order."""


@dataclass
class Tally:
    """What :class:`Figures` are made of, per step and per rank: the tallies of a run's
    chunks of steps join into the run's (:meth:`join`)."""

    steps: np.ndarray
    """The steps kept, sorted."""
    step_s: np.ndarray
    comm: np.ndarray
    """Per step, the mean over the ranks with steps of their communication time."""
    exposed: np.ndarray
    held: np.ndarray
    """Per rank, seconds held over the steps."""
    ranks_with_steps: np.ndarray
    ops: dict[tuple[str, str], np.ndarray]
    """Per (op, role) with calls, the :data:`OP_FIELDS` sums over the steps and ranks."""
    critical: list[PathShare]
    """The critical path of the last step kept."""

    @classmethod
    def join(cls, parts: list[Tally]) -> Tally:
        """The tally of disjoint steps' ``parts``, in step order."""
        ops: dict[tuple[str, str], np.ndarray] = {}
        for part in parts:
            for key, sums in part.ops.items():
                ops[key] = ops[key] + sums if key in ops else sums
        return cls(
            np.concatenate([p.steps for p in parts]),
            np.concatenate([p.step_s for p in parts]),
            np.concatenate([p.comm for p in parts]),
            np.concatenate([p.exposed for p in parts]),
            np.sum([p.held for p in parts], axis=0),
            np.logical_or.reduce([p.ranks_with_steps for p in parts]),
            ops,
            parts[-1].critical,
        )

    def figures(self) -> Figures:
        n_steps, with_steps = self.steps.size, self.ranks_with_steps
        comm_s = float(np.median(self.comm)) if n_steps else 0.0
        exposed_s = float(np.median(self.exposed)) if n_steps else 0.0
        candidates = np.flatnonzero(with_steps)
        slowest = int(candidates[np.argmin(self.held[candidates])]) if candidates.size else 0
        scale = 1.0 / max(n_steps * int(with_steps.sum()), 1)
        return Figures(
            steps=self.steps.tolist(),
            step_s=self.step_s.tolist(),
            comm_s=comm_s,
            exposed_s=exposed_s,
            overlapped_s=max(comm_s - exposed_s, 0.0),
            ops=_op_rows({key: sums * scale for key, sums in self.ops.items()}),
            slowest_rank=slowest,
            slowest_held_s=float(self.held[slowest]) / max(n_steps, 1),
            median_held_s=float(np.median(self.held[candidates])) / max(n_steps, 1)
            if candidates.size
            else 0.0,
            critical=self.critical,
        )


def figures(prog: Program, tl: Timeline, keep: list[int]) -> Figures:
    """The figures of timeline ``tl`` over steps ``keep``."""
    return tally(prog, tl, keep).figures()


def tally(prog: Program, tl: Timeline, keep: list[int]) -> Tally:
    """The tally of timeline ``tl`` over steps ``keep``.

    Rank by rank (a rank's events are contiguous), so what is made on the way
    is the size of one rank's events, not the run's.
    """
    tr = prog.trace
    n_ranks = tr.world_size
    steps = np.array(sorted(keep), dtype=np.int64)
    n_steps = steps.size
    dur = tl.step_marks[1::2] - tl.step_marks[0::2]
    row_step = np.searchsorted(steps, tr.step_index)
    row_kept = (row_step < n_steps) & (steps[np.minimum(row_step, n_steps - 1)] == tr.step_index)
    step_s = np.zeros(n_steps)
    np.maximum.at(step_s, row_step[row_kept], dur[row_kept])
    comm = np.zeros((n_steps, n_ranks))
    exposed = np.zeros((n_steps, n_ranks))
    held = np.zeros((n_steps, n_ranks))
    ops = np.zeros((len(OP_FIELDS), len(tr.op_names) * len(tr.role_names)))
    bounds = np.searchsorted(tr.rank, np.arange(n_ranks + 1))
    for r in range(n_ranks):
        part = slice(int(bounds[r]), int(bounds[r + 1]))
        ev_step = np.searchsorted(steps, tr.step[part])
        kept = (ev_step < n_steps) & (steps[np.minimum(ev_step, n_steps - 1)] == tr.step[part])
        cell, rank_held = ev_step[kept], tl.held[part][kept]
        issue, end = tl.issue[part][kept], tl.end[part][kept]
        got, c, x = exposure(tr.step[part][kept], issue, end, rank_held, _windows(tr, tl, r))
        at = np.searchsorted(steps, got)
        comm[at, r], exposed[at, r] = c, x
        held[:, r] = np.bincount(cell, weights=rank_held, minlength=n_steps)
        ops += _op_totals(prog, tl, part, kept)
    ranks_with_steps = np.zeros(n_ranks, dtype=bool)
    ranks_with_steps[tr.step_rank] = True
    n_roles = len(tr.role_names)
    return Tally(
        steps=steps,
        step_s=step_s,
        comm=comm[:, ranks_with_steps].mean(axis=1),
        exposed=exposed[:, ranks_with_steps].mean(axis=1),
        held=held.sum(axis=0),
        ranks_with_steps=ranks_with_steps,
        ops={
            (tr.op_names[k // n_roles], tr.role_names[k % n_roles]): ops[:, k].copy()
            for k in np.flatnonzero(ops[0]).tolist()
        },
        critical=critical_path(prog, tl, int(steps[-1])) if n_steps else [],
    )


def _windows(tr: Trace, tl: Timeline, rank: int) -> Windows:
    """Rank ``rank``'s replayed step windows (step, start, end), sorted by step."""
    rows = np.flatnonzero(tr.step_rank == rank)
    rows = rows[np.argsort(tr.step_index[rows], kind="stable")]
    return tr.step_index[rows], tl.step_marks[2 * rows], tl.step_marks[2 * rows + 1]


def _op_totals(prog: Program, tl: Timeline, part: slice, kept: np.ndarray) -> np.ndarray:
    """Per (op, role) code, the :data:`OP_FIELDS` sums of the kept events of ``part``."""
    tr = prog.trace
    n_roles = len(tr.role_names)
    key = (tr.op[part].astype(np.int64) * n_roles + tr.role[part])[kept]
    start = tl.start[prog.inst[part][kept]]
    issue, end = tl.issue[part][kept], tl.end[part][kept]
    n = len(tr.op_names) * n_roles
    # the replay's members are served from their instance's start: none queues on its own
    _, wait, service, _ = latency_split(end - issue, end - issue, start - issue)
    weights = (
        None,
        tr.size_bytes[part][kept].astype(np.float64),
        end - issue,
        service,
        wait,
        tl.held[part][kept],
    )
    return np.array([np.bincount(key, weights=w, minlength=n) for w in weights])


def _op_rows(totals: dict[tuple[str, str], np.ndarray]) -> list[OpRow]:
    """Per (op, role) with calls, the rows of ``totals`` (per step per rank), costliest first."""
    rows = [
        OpRow(
            op=op,
            role=role,
            calls=float(calls),
            bytes=float(size),
            time_s=float(time),
            service_s=float(service),
            wait_s=float(wait),
            exposed_s=float(exposed),
        )
        for (op, role), (calls, size, time, service, wait, exposed) in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r.time_s, r.op, r.role))
