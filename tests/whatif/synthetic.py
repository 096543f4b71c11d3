"""Hand-written event tables for replay tests: a :class:`Trace` without a run directory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from commlens.whatif.source import Trace

US = 1000  # ns per microsecond: tables are written in µs


@dataclass
class Ev:
    """One event; times in µs."""

    rank: int
    op: str
    issue: float
    end: float
    group: str = "0"
    members: tuple[int, ...] = (0, 1)
    is_async: bool = False
    wait: float | None = None
    """Time the caller was held; default: the whole op for a blocking one, 0 for async."""
    peer: int = -1
    size: int = 1024
    step: int = 0
    role: str = "dp"


def make_trace(events: list[Ev], steps: list[tuple[int, int, float, float]]) -> Trace:
    """A trace of ``events`` (in issue order per rank) and (rank, step, start, end) windows."""
    events = sorted(events, key=lambda e: (e.rank, e.issue))
    ops = sorted({e.op for e in events})
    groups = sorted({(e.group, e.members) for e in events})
    group_names = [g for g, _ in groups]
    roles = sorted({e.role for e in events})
    steps = sorted(steps)
    world = 1 + max(max(e.rank for e in events), max(s[0] for s in steps))

    def wait(e: Ev) -> float:
        if e.wait is not None:
            return e.wait
        return 0.0 if e.is_async else e.end - e.issue

    def ns(values: list[float]) -> np.ndarray:
        return np.array([round(v * US) for v in values], dtype=np.int64)

    return Trace(
        name="synthetic",
        world_size=world,
        rank=np.array([e.rank for e in events], dtype=np.int64),
        op=np.array([ops.index(e.op) for e in events], dtype=np.int32),
        op_names=ops,
        group=np.array([group_names.index(e.group) for e in events], dtype=np.int32),
        group_names=group_names,
        groups=[m for _, m in groups],
        role=np.array([roles.index(e.role) for e in events], dtype=np.int32),
        role_names=roles,
        size_bytes=np.array([e.size for e in events], dtype=np.int64),
        peer=np.array([e.peer for e in events], dtype=np.int64),
        is_async=np.array([e.is_async for e in events], dtype=bool),
        t_issue=ns([e.issue for e in events]),
        t_end=ns([e.end for e in events]),
        t_wait=ns([wait(e) for e in events]),
        step=np.array([e.step for e in events], dtype=np.int64),
        step_rank=np.array([s[0] for s in steps], dtype=np.int64),
        step_index=np.array([s[1] for s in steps], dtype=np.int64),
        step_start=ns([s[2] for s in steps]),
        step_end=ns([s[3] for s in steps]),
    )


def repeated_ops(
    op: str, size: int, service_us: float, steps: int, lag_us: float = 1.0
) -> tuple[list[Ev], list[tuple[int, int, float, float]]]:
    """One blocking ``op`` of ``size`` bytes per step on 2 ranks, lasting ``service_us``
    (rank 1 ending ``lag_us`` later), 10 µs apart: its events and step windows."""
    events, windows, t = [], [], 0.0
    for step in range(steps):
        events += [
            Ev(0, op, t, t + service_us, size=size, step=step),
            Ev(1, op, t, t + service_us + lag_us, size=size, step=step),
        ]
        end = t + service_us + lag_us
        windows += [(r, step, t, end) for r in (0, 1)]
        t = end + 10
    return events, windows


def us(value: float) -> pytest.approx:
    """``value`` microseconds, as seconds to compare with."""
    return pytest.approx(value * 1e-6, abs=1e-12)


def both_steps(end: float) -> list[tuple[int, int, float, float]]:
    """Step 0 of ranks 0 and 1, from 0 to ``end`` µs."""
    return [(0, 0, 0, end), (1, 0, 0, end)]
