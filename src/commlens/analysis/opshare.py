"""Each op's part of the steps' communication: shares of the step that add up.

A rank's communication in a step is the union of the step's op intervals cut
to the step's window (``comm_s`` of :func:`commlens.analysis.steps.step_table`).
Each moment of it is split equally among the ops open then
(:func:`commlens.analysis.matched.intervals.split_time`), so the parts of all ops add up
to that union exactly: an op's part divided by the windows' total is its share
of the step, and the shares of any set of ops add up to at most the
communication share, at most 1, whether the ops overlap (DDP's queued buckets,
whose summed call times exceed the step on a slow link) or not. ``commlens
run``'s summary and a sweep's per-op shares are these.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.analysis.matched.intervals import clip_to_windows, split_time, windows_by_rank
from commlens.trace.reader import RunView

SCHEMA = pa.schema(
    [
        ("op", pa.string()),
        ("role", pa.string()),
        ("ranks", pa.int64()),
        ("part_s", pa.float64()),
        ("share", pa.float64()),
    ]
)


def op_parts(view: RunView, first: int | None = None, stop: int | None = None) -> pa.Table:
    """Per (op, role), costliest first: the ranks that issued it in steps ``[first,
    stop)`` (None: open) with a recorded window, its part of their communication
    (``part_s``, all ranks and steps together) and its ``share``: ``part_s`` over the
    total of those windows on all ranks."""
    parts: dict[tuple[str, str], float] = {}
    issued: dict[tuple[str, str], set[int]] = {}
    total_ns = 0
    windows = windows_by_rank(view.sql("SELECT * FROM steps"))
    for rank in view.ranks:
        w_step, w_start, w_end = windows.get(rank, (np.zeros(0, np.int64),) * 3)
        kept = np.ones(w_step.size, bool)
        if first is not None:
            kept &= w_step >= first
        if stop is not None:
            kept &= w_step < stop
        if not kept.any():
            continue
        mine = (w_step[kept], w_start[kept], w_end[kept])
        total_ns += int(np.maximum(mine[2] - mine[1], 0).sum())
        t = view.read_rank(rank, ["op", "role", "step", "t_issue_ns", "t_end_ns"])
        step = pc.fill_null(t.column("step"), 0).to_numpy()
        inside = np.flatnonzero(np.isin(step, mine[0]))
        if not inside.size:
            continue
        s = t.column("t_issue_ns").to_numpy()[inside]
        e = np.maximum(t.column("t_end_ns").to_numpy()[inside], s)
        part = split_time(*clip_to_windows(step[inside], s, e, mine))
        key = pc.binary_join_element_wise(
            pc.cast(t.column("op"), pa.string()),
            pc.fill_null(pc.cast(t.column("role"), pa.string()), ""),
            "\x00",
        ).take(pa.array(inside))
        codes = pc.dictionary_encode(key).combine_chunks()
        sums = np.bincount(codes.indices.to_numpy(), weights=part, minlength=len(codes.dictionary))
        for name, value in zip(codes.dictionary.to_pylist(), sums.tolist(), strict=True):
            op, role = name.split("\x00", 1)
            parts[(op, role)] = parts.get((op, role), 0.0) + value / 1e9
            issued.setdefault((op, role), set()).add(rank)
    total_s = total_ns / 1e9
    rows = [
        {
            "op": op,
            "role": role,
            "ranks": len(issued[(op, role)]),
            "part_s": part,
            "share": part / total_s if total_s > 0 else 0.0,
        }
        for (op, role), part in sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)
