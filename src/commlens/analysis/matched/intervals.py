"""Unions of intervals and the exposure of communication: one definition for every command.

A union of intervals sorted by start: interval i adds ``max(0, M_i −
max(s_i, M_{i−1}))``, where M is the running maximum of the ends, so
overlapping ops are counted once.

A rank's *communication* in a step is the union of its ops' ``[t_issue,
t_end]``; its *exposed* communication the union of the spans it was held by
them, ``[t_end − held, t_end]`` (``held``: the time the caller was blocked in
the call or in ``wait()``, at most the op's own length); both cut to the
rank's window of that step (:func:`clip_to_windows`), so neither exceeds the
step. ``report`` reads ``held`` from the capture (``t_wait``), ``whatif``
from its replay: :func:`exposure` is the one definition of both.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def union(seg_starts: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Covered time of each segment; rows sorted by (segment, s)."""
    if not s.size:
        return np.zeros(0, e.dtype)
    running = np.maximum.accumulate(e)
    # The running maximum over all rows gives each segment's union unless an earlier
    # segment ends after this one's first start (an op across a step boundary):
    # only then is the maximum restarted for that segment.
    leaks = np.flatnonzero(running[seg_starts[1:] - 1] > s[seg_starts[1:]]) + 1
    if leaks.size:
        bounds = np.append(seg_starts, s.size)
        for i in leaks.tolist():  # restart the maximum at each leaking segment
            a, b = bounds[i], bounds[i + 1]
            running[a:b] = np.maximum.accumulate(e[a:b])
    prev = np.empty_like(running)
    prev[1:] = running[:-1]
    prev[seg_starts] = s[seg_starts]
    covered = np.maximum(running - np.maximum(s, prev), 0)
    return np.add.reduceat(covered, seg_starts)


def segments(keys: np.ndarray) -> np.ndarray:
    """Index of the first row of each run of equal ``keys``."""
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys[:0]


def order_by(step: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row order by (step, t); the identity when already so (the usual case)."""
    d_step, d_t = np.diff(step), np.diff(t)
    if np.all((d_step > 0) | ((d_step == 0) & (d_t >= 0))):
        return np.arange(step.size)
    order = np.argsort(t, kind="stable")
    return order[np.argsort(step[order], kind="stable")]


def cover(key: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys, sorted; the union of the intervals ``[s, e]`` of each), rows
    in any order."""
    order = order_by(key, s)
    keys = key[order]
    starts = segments(keys)
    return keys[starts], union(starts, s[order], e[order])


Windows = tuple[np.ndarray, np.ndarray, np.ndarray]
"""One rank's step windows: (step, start, end), sorted by step; times in ns (int64)
or seconds (float64), as the ops' times."""


def windows_by_rank(windows: pa.Table) -> dict[int, Windows]:
    """Each rank's step windows (the run's ``steps`` view: rank, step, t_start_ns,
    t_end_ns) as (step, start, end), sorted by step."""
    rank = windows.column("rank").to_numpy()
    step = windows.column("step").to_numpy()
    start = windows.column("t_start_ns").to_numpy()
    end = windows.column("t_end_ns").to_numpy()
    out: dict[int, Windows] = {}
    for r in np.unique(rank).tolist():
        mine = np.flatnonzero(rank == r)
        mine = mine[np.argsort(step[mine], kind="stable")]
        out[int(r)] = (step[mine], start[mine], end[mine])
    return out


def clip_to_windows(
    step: np.ndarray, s: np.ndarray, e: np.ndarray, windows: Windows | None
) -> tuple[np.ndarray, np.ndarray]:
    """``[s, e]`` of each op cut to the window of its step (ops of a step without a
    window, or with an unknown end (NaN), are kept whole): the part of an op that
    lies outside its step's window is no part of that step's time."""
    bounds = _window_bounds(step, s.dtype, windows)
    if bounds is None:
        return s, e
    return np.clip(s, *bounds), np.clip(e, *bounds)


def _window_bounds(
    step: np.ndarray, dtype: np.dtype, windows: Windows | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """(low, high) of the window of each op's step, for times of ``dtype`` (an op of a
    step without a window, or with an unknown end: unbounded); None: no windows."""
    if windows is None or not windows[0].size or not step.size:
        return None
    w_step, w_start, w_end = windows
    at = np.minimum(np.searchsorted(w_step, step), w_step.size - 1)
    has = w_step[at] == step
    if np.issubdtype(dtype, np.floating):
        has &= ~(np.isnan(w_start[at]) | np.isnan(w_end[at]))
        low, high = -np.inf, np.inf
    else:
        low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    lo = np.where(has, w_start[at], low)
    hi = np.where(has, np.maximum(w_end[at], w_start[at]), high)
    return lo, hi


def held_from(s: np.ndarray, e: np.ndarray, held: np.ndarray) -> np.ndarray:
    """When each op began to hold its caller: ``t_end − held``, ``held`` cut to
    ``[0, t_end − t_issue]``."""
    return e - np.clip(np.minimum(held, e - s), 0, None)


def exposure(
    step: np.ndarray, s: np.ndarray, e: np.ndarray, held: np.ndarray, windows: Windows | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the steps with ops, sorted; per step the communication, the union of ``[s, e]``;
    its exposed part, the union of ``[e − held, e]``), both cut to the step windows
    (see the module docstring). One rank's ops, rows in any order."""
    held_s = held_from(s, e, held)
    bounds = _window_bounds(step, s.dtype, windows)
    if bounds is not None:  # each op cut to its step's window (as :func:`clip_to_windows`)
        s, e, held_s = (np.clip(t, *bounds) for t in (s, e, held_s))
    steps, comm = cover(step, s, e)
    _, exposed = cover(step, held_s, e)
    return steps, comm, exposed


def split_time(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's part of the time the intervals cover, each moment split equally
    among the intervals open then (ns): the parts add up to the union of the intervals
    (within rounding), and none exceeds its own length."""
    if not start.size:
        return np.zeros(0, np.int64)
    points = np.concatenate([start, end])
    delta = np.repeat(np.array([1, -1], np.int64), start.size)
    order = np.lexsort((-delta, points))  # by time; at one time, starts before ends
    running = np.cumsum(delta[order])[:-1]
    gap = np.diff(points[order]).astype(np.float64)
    share = np.where(running > 0, gap / np.maximum(running, 1), 0.0)
    at = np.empty(points.size, np.float64)
    at[order] = np.concatenate([[0.0], np.cumsum(share)])
    return np.rint(at[start.size :] - at[: start.size]).astype(np.int64)
