"""Clock offsets checked against causality: the run's own order fixes a bad offset.

The reader puts every rank on rank 0's clock with the offsets measured at
start-up; on a loaded host one round trip can be off by milliseconds, and
then a rank's ops end before their peers issued them. A collective whose
every member contributes data (all-reduce, all-gather, reduce-scatter,
all-to-all, barrier) cannot end on any member before every member issued
it, a receive cannot end before its send was issued, a broadcast's or
scatter's member before its root issued it, a reduce's or gather's root
before every member issued it: with ``δ`` the
correction of each rank's clock, ``δ_a − δ_b ≤ end_b − issue_a`` for every
such pair. When the offsets as read break one of these bounds, ranks are
corrected along a spanning tree of the tightest pairs (from the lowest
rank): a pair keeps its offset when it fits the bounds, else takes the
middle of them (the NTP estimate). Runs that respect causality are left
alone. Every command reads a run's times after this check
(:mod:`commlens.analysis.matched.run`: ``whatif``'s program, ``rank_pass``'s view).
"""

from __future__ import annotations

import numpy as np

from commlens.analysis.matched.ops import RunOps
from commlens.optable import BLOCKING, FROM_ROOT, TO_ROOT

MAX_PAIRS_GROUP = 64
"""Groups larger than this contribute only neighbouring pairs (a ring)."""
MAX_WORLD = 4096
"""Beyond this many ranks clocks are taken as read."""
NONE = np.iinfo(np.int64).max
PAIRS_AT_ONCE = 1 << 16
"""Member pairs of a group's instances handled in one pass (their arrays' length)."""


def _strict_instances(
    tr: RunOps, inst: np.ndarray, members: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The events of the collectives that must be ordered, in the order of their
    instances, the first of each instance in that order and each instance's member
    count."""
    strict = np.isin(np.array(tr.op_names, dtype=object), BLOCKING)[tr.op]
    order = members[strict[members]]
    del strict
    inst_sorted = inst[order]
    cuts = np.flatnonzero(np.r_[True, inst_sorted[1:] != inst_sorted[:-1], True])
    return order, cuts[:-1], np.diff(cuts)


def _collectives_in_order(order: np.ndarray, starts: np.ndarray, tr: RunOps) -> bool:
    """Whether in every instance of ``order`` (from :func:`_strict_instances`) each member
    ended after every member issued it: then no pair of :func:`_pair_bounds` is below 0,
    and where no rooted op's or message's pair is either, the clocks hold and the pairs
    need not be computed (a cheap test, one number per instance)."""
    if not order.size:
        return True
    ends = np.minimum.reduceat(tr.t_end[order], starts)
    issues = np.maximum.reduceat(tr.t_issue[order], starts)
    return bool((ends >= issues).all())


def _bounds(
    tr: RunOps, inst: np.ndarray, members: np.ndarray, send_of: np.ndarray, recv_of: np.ndarray
) -> np.ndarray:
    """W[a, b]: the least ``end_b − issue_a`` over the pairs that must be ordered (ns);
    ``members``: the events in the order of their instances."""
    bound = _message_bounds(tr, inst, send_of, recv_of)
    _pair_bounds(tr, *_strict_instances(tr, inst, members), bound)
    return bound


def _message_bounds(
    tr: RunOps, inst: np.ndarray, send_of: np.ndarray, recv_of: np.ndarray
) -> np.ndarray:
    """:func:`_bounds` over the rooted ops' and the messages' pairs only."""
    w = tr.world_size
    bound = np.full((w, w), NONE, dtype=np.int64)
    _rooted_bounds(tr, inst, bound)
    pairs = send_of >= 0
    s, r = send_of[pairs], recv_of[pairs]
    np.minimum.at(bound, (tr.rank[s], tr.rank[r]), tr.t_end[r] - tr.t_issue[s])
    return bound


def _pair_bounds(
    tr: RunOps, order: np.ndarray, starts: np.ndarray, sizes: np.ndarray, bound: np.ndarray
) -> None:
    """Lower ``bound`` by the pairs of members of the collectives that must be ordered
    (:func:`_strict_instances`): every pair up to :data:`MAX_PAIRS_GROUP` members, the
    ring's neighbours beyond."""
    for n in np.unique(sizes).tolist():
        if n < 2:
            continue
        firsts = starts[sizes == n]
        if n <= MAX_PAIRS_GROUP:
            a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
            a, b = a[a != b], b[a != b]
        else:
            a, b = np.arange(n), np.roll(np.arange(n), -1)
            a, b = np.r_[a, b], np.r_[b, a]
        rows = max(1, PAIRS_AT_ONCE // a.size)  # instances a pass: its pairs' arrays stay small
        for lo in range(0, firsts.size, rows):
            members = order[firsts[lo : lo + rows, None] + np.arange(n)]  # instances x members
            ea, eb = members[:, a].ravel(), members[:, b].ravel()
            np.minimum.at(bound, (tr.rank[ea], tr.rank[eb]), tr.t_end[eb] - tr.t_issue[ea])


def _rooted_bounds(tr: RunOps, inst: np.ndarray, bound: np.ndarray) -> None:
    """Lower ``bound`` by the rooted ops' pairs: a member of a broadcast or scatter
    cannot end before its root issued it, the root of a reduce or gather cannot end
    before every member issued it (``peer``: the root)."""
    names = np.array(tr.op_names, dtype=object)
    out, into = np.isin(names, FROM_ROOT)[tr.op], np.isin(names, TO_ROOT)[tr.op]
    rooted = (out | into) & (tr.peer >= 0)
    is_root = rooted & (tr.peer == tr.rank)
    if not is_root.any():
        return
    root_of = np.full(int(inst.max()) + 1, -1, dtype=np.int64)
    root_of[inst[is_root]] = np.flatnonzero(is_root)
    other = np.flatnonzero(rooted & ~is_root)
    other = other[root_of[inst[other]] >= 0]
    root = root_of[inst[other]]
    o, ro = other[out[other]], root[out[other]]
    np.minimum.at(bound, (tr.rank[ro], tr.rank[o]), tr.t_end[o] - tr.t_issue[ro])
    i, ri = other[into[other]], root[into[other]]
    np.minimum.at(bound, (tr.rank[i], tr.rank[ri]), tr.t_end[ri] - tr.t_issue[i])


def causal_shifts(
    tr: RunOps, inst: np.ndarray, members: np.ndarray, send_of: np.ndarray, recv_of: np.ndarray
) -> np.ndarray:
    """Nanoseconds to add to each rank's times (all 0 when the clocks respect causality);
    ``members``: the events in the order of their instances (stable)."""
    w = tr.world_size
    if w < 2 or w > MAX_WORLD:
        return np.zeros(w, dtype=np.int64)
    bound = np.full((w, w), NONE, dtype=np.int64)
    lower_bounds(tr, inst, members, send_of, recv_of, bound, pairs=False)
    return shifts_of(bound)


def lower_bounds(
    tr: RunOps,
    inst: np.ndarray,
    members: np.ndarray,
    send_of: np.ndarray,
    recv_of: np.ndarray,
    bound: np.ndarray,
    *,
    pairs: bool,
) -> bool:
    """Lower ``bound`` (W[a, b], see :func:`_bounds`) by the messages and rooted ops of
    ``tr`` (matched: ``inst``, ``members``, ``send_of``, ``recv_of``), and by the pairs of
    its collectives' members when ``pairs`` or they matter: some instance has a member
    that ended before another issued it, or ``bound`` is below 0 somewhere. Whether the
    collectives' pairs were taken. ``bound`` of several parts of a run (the bounds are
    minima) is the bound of the run when every part that had its pairs left out is
    taken again with ``pairs`` once some part needed them."""
    strict = _strict_instances(tr, inst, members)
    np.minimum(bound, _message_bounds(tr, inst, send_of, recv_of), out=bound)
    if pairs or not _collectives_in_order(strict[0], strict[1], tr) or (bound < 0).any():
        _pair_bounds(tr, *strict, bound)  # the pairs matter: every bound as it is
        return True
    return False


def shifts_of(bound: np.ndarray) -> np.ndarray:
    """Nanoseconds to add to each rank's times given the bounds ``bound`` (all 0 when
    none is below 0)."""
    w = bound.shape[0]
    shifts = np.zeros(w, dtype=np.int64)
    if not (bound < 0).any():
        return shifts
    a, b = np.nonzero(np.triu((bound < NONE) & (bound.T < NONE), 1))
    hi, lo = bound[a, b], -bound[b, a]  # δ_a − δ_b must lie in [lo, hi]
    usable = lo <= hi
    a, b, lo, hi = a[usable], b[usable], lo[usable], hi[usable]
    parent = list(range(w))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    tree: dict[int, list[tuple[int, float]]] = {r: [] for r in range(w)}
    for k in np.argsort(hi - lo, kind="stable").tolist():
        ra, rb = root(int(a[k])), root(int(b[k]))
        if ra == rb:
            continue
        parent[ra] = rb
        x = 0 if lo[k] <= 0 <= hi[k] else (int(lo[k]) + int(hi[k])) // 2
        tree[int(a[k])].append((int(b[k]), -x))  # δ_b = δ_a − x
        tree[int(b[k])].append((int(a[k]), x))  # δ_a = δ_b + x
    seen = [False] * w
    for start in range(w):
        if seen[start]:
            continue
        seen[start], todo = True, [start]
        while todo:
            node = todo.pop()
            for other, step in tree[node]:
                if not seen[other]:
                    seen[other] = True
                    shifts[other] = shifts[node] + step
                    todo.append(other)
    return shifts


def shift_clocks(tr: RunOps, shifts: np.ndarray) -> None:
    """Move each rank's times in ``tr`` by ``shifts[rank]`` nanoseconds (new arrays:
    the old ones are freed unless held elsewhere)."""
    by_step = shifts[tr.step_rank]
    tr.step_start, tr.step_end = tr.step_start + by_step, tr.step_end + by_step
    by_event = shifts[tr.rank]
    tr.t_issue = tr.t_issue + by_event
    tr.t_end = tr.t_end + by_event
