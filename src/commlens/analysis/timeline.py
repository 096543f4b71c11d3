"""Per-step rows of one rank and bytes spread over time bins, for the rank pass.

Unions of intervals and the exposure of communication are the matched run's
(:mod:`commlens.analysis.matched.intervals`). Used by
:mod:`commlens.analysis.rankpass`.
"""

from __future__ import annotations

import numpy as np

from commlens.analysis.matched.intervals import Windows, exposure, order_by, segments


def step_rows(
    rank: int,
    step: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    wait: np.ndarray,
    size: np.ndarray,
    windows: Windows | None = None,
) -> dict[str, np.ndarray]:
    """Per step of one rank: op count, bytes, its communication (``comm_s``) and the
    exposed part of it (``exposed_s``, ``wait`` the time each op held its caller),
    as :func:`~commlens.analysis.matched.intervals.exposure` defines them; the plain sum of op
    durations (``comm_sum_s``), first issue and last end, uncut."""
    order = order_by(step, s)
    st, ss, es = step[order], s[order], e[order]
    starts = segments(st)
    _, comm, exposed = exposure(step, s, e, wait, windows)
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
