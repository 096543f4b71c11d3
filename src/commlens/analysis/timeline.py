"""Time kernels in numpy: unions of intervals per step, bytes spread over time bins.

A union of intervals sorted by start: interval i adds ``max(0, M_i −
max(s_i, M_{i−1}))``, where M is the running maximum of the ends, so
overlapping ops are counted once. Used by :mod:`commlens.analysis.rankpass`.
"""

from __future__ import annotations

import numpy as np


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


def step_rows(
    rank: int, step: np.ndarray, s: np.ndarray, e: np.ndarray, wait: np.ndarray, size: np.ndarray
) -> dict[str, np.ndarray]:
    order = order_by(step, s)
    st, ss, es = step[order], s[order], e[order]
    starts = segments(st)
    comm = union(starts, ss, es)
    blocked_from = e - np.clip(np.minimum(wait, e - s), 0, None)
    order_x = order_by(step, blocked_from)
    exposed = union(segments(step[order_x]), blocked_from[order_x], e[order_x])
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


def queue_starts(group: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """When each op's service on its group's queue began: ``max(issue, latest end of
    the group's earlier ops)``, rows in issue (seq) order. ``end − start`` summed
    over a group's ops is the union of their intervals, never more."""
    start = s.copy()
    small = group.size and 0 <= group.min() and group.max() < 2**15
    key = group.astype(np.int16) if small else group  # 16-bit keys: numpy's radix sort
    order = np.argsort(key, kind="stable")  # by group, each in row (issue) order
    bounds = np.append(segments(key[order]), order.size)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        idx = order[a:b]
        ends = np.maximum.accumulate(e[idx])
        start[idx[1:]] = np.maximum(s[idx[1:]], ends[:-1])
    return np.minimum(start, np.maximum(e, s))


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
