"""Time kernels in numpy: unions of intervals per step, bytes spread over time bins.

A union of intervals sorted by start: interval i adds ``max(0, M_i −
max(s_i, M_{i−1}))``, where M is the running maximum of the ends, so
overlapping ops are counted once. Used by :mod:`commlens.analysis.rankpass`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def union(seg_starts: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Covered time of each segment; rows sorted by (segment, s)."""
    if not s.size:
        return np.zeros(0, np.int64)
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
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys[:0]


def order_by(step: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row order by (step, t); the identity when already so (the usual case)."""
    d_step, d_t = np.diff(step), np.diff(t)
    if np.all((d_step > 0) | ((d_step == 0) & (d_t >= 0))):
        return np.arange(step.size)
    order = np.argsort(t, kind="stable")
    return order[np.argsort(step[order], kind="stable")]


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
    if windows is None or not windows[0].size or not step.size:
        return s, e
    w_step, w_start, w_end = windows
    at = np.minimum(np.searchsorted(w_step, step), w_step.size - 1)
    has = w_step[at] == step
    if np.issubdtype(s.dtype, np.floating):
        has &= ~(np.isnan(w_start[at]) | np.isnan(w_end[at]))
        low, high = -np.inf, np.inf
    else:
        low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    lo = np.where(has, w_start[at], low)
    hi = np.where(has, np.maximum(w_end[at], w_start[at]), high)
    return np.clip(s, lo, hi), np.clip(e, lo, hi)


def step_rows(
    rank: int,
    step: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    wait: np.ndarray,
    size: np.ndarray,
    windows: Windows | None = None,
) -> dict[str, np.ndarray]:
    """Per step of one rank: op count, bytes, the union of the op intervals
    (``comm_s``) and of the blocked ones (``exposed_s``), both cut to the step's
    recorded window (``windows``), so neither exceeds it; the plain sum of op
    durations (``comm_sum_s``), first issue and last end, uncut."""
    order = order_by(step, s)
    st, ss, es = step[order], s[order], e[order]
    starts = segments(st)
    comm = union(starts, *clip_to_windows(st, ss, es, windows))
    blocked_from = e - np.clip(np.minimum(wait, e - s), 0, None)
    order_x = order_by(step, blocked_from)
    step_x = step[order_x]
    exposed = union(
        segments(step_x), *clip_to_windows(step_x, blocked_from[order_x], e[order_x], windows)
    )
    counts = np.diff(np.append(starts, st.size))
    return {
        "rank": np.full(starts.size, rank, np.int32),
        "step": st[starts].astype(np.int32),
        "ops": counts.astype(np.int64),
        "bytes": np.add.reduceat(size[order], starts) if starts.size else np.zeros(0, np.int64),
        "comm_s": comm / 1e9,
        "comm_sum_s": (np.add.reduceat(es - ss, starts) / 1e9) if starts.size else comm * 0.0,
        "exposed_s": exposed / 1e9,
        "first_ns": np.minimum.reduceat(ss, starts) if starts.size else ss,
        "last_ns": np.maximum.reduceat(es, starts) if starts.size else es,
    }


def queue_service(
    group: np.ndarray, s: np.ndarray, e: np.ndarray, workers: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's service start and service time on its group's queue (ns).

    Rows in issue (seq) order. A group serves its ops first in, first out on
    ``workers`` servers: an op starts at ``max(issue, the time a server frees)``
    (one server: the latest end of the group's earlier ops, as on a CUDA stream;
    two: the second latest, as gloo's worker threads). Ops served at once share
    the time equally: an op's service time is its share of ``[start, end]``, so
    the service times of a group's ops add up to the union of their intervals,
    never more (with one server it is ``end − start``).
    """
    start = s.copy()
    small = group.size and 0 <= group.min() and group.max() < 2**15
    key = group.astype(np.int16) if small else group  # 16-bit keys: numpy's radix sort
    order = np.argsort(key, kind="stable")  # by group, each in row (issue) order
    bounds = np.append(segments(key[order]), order.size)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        idx = order[a:b]
        free = _server_free(e[idx], workers)
        start[idx[1:]] = np.maximum(s[idx[1:]], free[:-1])
    start = np.minimum(start, np.maximum(e, s))
    if workers == 1:
        return start, e - start
    service = np.empty_like(start)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        idx = order[a:b]
        service[idx] = _shares(start[idx], e[idx])
    return start, service


def _server_free(ends: np.ndarray, workers: int) -> np.ndarray:
    """After each op is taken, when the first of ``workers`` FIFO servers frees: the
    ``workers``-th latest end so far (1 or 2 servers)."""
    latest = np.maximum.accumulate(ends)
    if workers == 1 or ends.size < 2:
        return latest if workers == 1 else np.full(ends.size, np.iinfo(np.int64).min)
    # second latest of ends[:i+1] = running max of min(latest of ends[:j], ends[j])
    second = np.empty_like(ends)
    second[0] = np.iinfo(np.int64).min
    second[1:] = np.maximum.accumulate(np.minimum(latest[:-1], ends[1:]))
    return second


def _shares(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's share of the time, the time split equally among the intervals
    open at each moment (ns, rounded): ``F(end) − F(start)``, F the integral of 1/n."""
    alone = end - start
    if start.size < 2:
        return alone
    if np.all(start[1:] >= start[:-1]):  # first in, first out: only overlapping runs share
        overlaps = start[1:] < np.maximum.accumulate(end)[:-1]
        if not overlaps.any():
            return alone  # one at a time: each holds its whole interval
        run = np.concatenate([[0], np.cumsum(~overlaps)])
        shared = np.bincount(run)[run] > 1
        alone[shared] = _shared(start[shared], end[shared])
        return alone
    return _shared(start, end)


def split_time(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's part of the time the intervals cover, each moment split equally
    among the intervals open then (ns): the parts add up to the union of the intervals
    (within rounding), and none exceeds its own length."""
    if not start.size:
        return np.zeros(0, np.int64)
    return _shared(start, end)


def _shared(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    points = np.concatenate([start, end])
    delta = np.repeat(np.array([1, -1], np.int64), start.size)
    order = np.lexsort((-delta, points))  # by time; at one time, starts before ends
    running = np.cumsum(delta[order])[:-1]
    gap = np.diff(points[order]).astype(np.float64)
    share = np.where(running > 0, gap / np.maximum(running, 1), 0.0)
    at = np.empty(points.size, np.float64)
    at[order] = np.concatenate([[0.0], np.cumsum(share)])
    return np.rint(at[start.size :] - at[: start.size]).astype(np.int64)


def spread(
    s: np.ndarray, e: np.ndarray, wire: np.ndarray, t0: int, bin_ns: int, n_bins: int
) -> np.ndarray:
    """Wire bytes per bin, each op's bytes spread evenly over its duration."""
    keep = wire > 0
    s_rel = s[keep] - t0
    e_rel = np.maximum(e[keep] - t0, s_rel + 1)
    w = wire[keep]
    b0, b1 = s_rel // bin_ns, (e_rel - 1) // bin_ns
    one = b0 == b1  # most ops fall in one bin: no expansion needed
    out = np.bincount(b0[one], weights=w[one], minlength=n_bins)[:n_bins]
    s_rel, e_rel, w, b0, b1 = s_rel[~one], e_rel[~one], w[~one], b0[~one], b1[~one]
    nb = b1 - b0 + 1
    rep = np.repeat(np.arange(s_rel.size), nb)
    b = b0[rep] + (np.arange(rep.size) - np.repeat(np.cumsum(nb) - nb, nb))
    overlap = np.minimum(e_rel[rep], (b + 1) * bin_ns) - np.maximum(s_rel[rep], b * bin_ns)
    weights = w[rep] * np.clip(overlap, 0, None) / (e_rel - s_rel)[rep]
    return out + np.bincount(b, weights=weights, minlength=n_bins)[:n_bins]
