"""The critical path of a replayed step: what its end waited for.

Walking back from the step's latest end (over its ranks): on a rank, time since
the last hold that ended is compute; a hold ended when its op ended, so the
path takes the op's service (start to end) and goes on from its start, to
the rank whose issue came last (or, when the op queued behind the one before
it on its group, to that op). It stops at the step's earliest start. What
it crossed (clipped to the step), summed per op and role, are the critical
path's top ops; the rest is compute. The shares add up to the span from the
earliest start to the latest end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.whatif.model import Program
from commlens.whatif.replay import Timeline


@dataclass(frozen=True)
class PathShare:
    op: str
    """An op name, or "compute"."""
    role: str
    seconds: float
    share: float


def critical_path(prog: Program, tl: Timeline, step: int) -> list[PathShare]:
    """Time on the critical path of ``step`` per (op, role), compute first."""
    tr = prog.trace
    rows = np.flatnonzero(tr.step_index == step)
    if not rows.size:
        return []
    begin = float(tl.step_marks[2 * rows].min())
    last = rows[np.argmax(tl.step_marks[2 * rows + 1])]
    rank, t = int(tr.step_rank[last]), float(tl.step_marks[2 * last + 1])
    # the holds that ended in the step, by rank, each rank's in the order they ended
    inside = np.flatnonzero((tl.held > 0) & (tl.end > begin) & (tl.end <= t))
    inside = inside[np.lexsort((tl.end[inside], tr.rank[inside]))]
    ends = tl.end[inside]
    bounds = np.searchsorted(tr.rank[inside], np.arange(tr.world_size + 1)).tolist()
    inst, start, by, queued = prog.inst, tl.start, tl.by, tl.queued
    first = prog.first_of_queue
    spent: dict[tuple[str, str], float] = {}
    compute, came_from = 0.0, -1
    for _ in range(len(tl.held) + 1):  # each hold is crossed once at most
        if t <= begin:
            break
        lo = bounds[rank]
        k = int(np.searchsorted(ends[lo : bounds[rank + 1]], t, "right")) - 1 + lo
        if k >= lo and inside[k] == came_from:  # the op just crossed, seen from its issuer
            k -= 1
        if k < lo or ends[k] <= begin:
            compute += t - begin
            break
        e = came_from = int(inside[k])
        compute += t - float(ends[k])
        i = int(inst[e])
        while True:  # through the op, and any it queued behind
            key = (tr.op_names[int(tr.op[e])], tr.role_names[int(tr.role[e])])
            service = float(tl.end[e]) - max(float(start[i]), begin)
            spent[key] = spent.get(key, 0.0) + max(service, 0.0)
            if not queued[i] or first[i]:
                break
            i -= 1
            members = prog.members[prog.offsets[i] : prog.offsets[i + 1]]
            e = int(members[np.argmax(tl.end[members])])
        t = float(start[i])
        rank = int(tr.rank[by[i]]) if by[i] >= 0 else rank
        # the issuer reached the op at t: its own time before that is the path now
        t = min(t, float(tl.issue[by[i]])) if by[i] >= 0 else t
    total = compute + sum(spent.values())
    out = [PathShare("compute", "", compute, compute / total if total > 0 else 0.0)]
    ranked = sorted(spent.items(), key=lambda kv: -kv[1])
    out += [PathShare(op, role, s, s / total if total > 0 else 0.0) for (op, role), s in ranked]
    return out
