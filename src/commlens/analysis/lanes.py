"""The ops of a few representative steps, lane by lane: what a timeline draws.

A lane is a rank, or, beyond :data:`RANK_LANES` ranks, a node (the ranks' launch
records) or a block of consecutive ranks; each op is one span on rank 0's
clock (the run's aligned times), in seconds from the first drawn step's start.
The representative steps are consecutive steps of the headline around the one
of median length, so a timeline shows a typical step and its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from commlens.analysis.internode import rank_nodes
from commlens.trace.files import format_ranks
from commlens.trace.reader import RunView

RANK_LANES = 8
"""Up to this many ranks, a lane per rank."""
MAX_LANES = 16
"""Beyond it, at most this many lanes (nodes or blocks of ranks)."""
MANY = 64
"""Past this many ranks a report draws one representative step, not three."""


@dataclass(frozen=True)
class Lanes:
    """The spans to draw: ``ops`` (lane, op, role, start_s, end_s), ``windows`` (lane,
    step, start_s, end_s), the lanes' labels and how many ranks each holds."""

    steps: list[int]
    ops: pa.Table
    windows: pa.Table
    labels: list[str]
    ranks_per_lane: list[int]
    by: str
    """'rank', 'node' or 'ranks' (blocks of consecutive ranks)."""


def representative_steps(step_t: pa.Table, count: int = 3) -> list[int]:
    """``count`` consecutive steps among the rows of ``step_t`` (a step summary of the
    headline's steps) centred on the step of median length."""
    rows = sorted(
        (r for r in step_t.to_pylist() if r.get("kind", "step") == "step"), key=lambda r: r["step"]
    )
    if not rows:
        return []
    order = sorted(range(len(rows)), key=lambda i: rows[i]["step_s"])
    mid = order[(len(order) - 1) // 2]
    first = min(max(mid - count // 2, 0), max(len(rows) - count, 0))
    return [r["step"] for r in rows[first : first + count]]


def _lane_of(view: RunView) -> tuple[dict[int, int], list[str], list[int], str]:
    """Each rank's lane, the lanes' labels and sizes, and what a lane is."""
    ranks = list(view.ranks)
    if len(ranks) <= RANK_LANES:
        return (
            {r: i for i, r in enumerate(ranks)},
            [f"rank {r}" for r in ranks],
            [1] * len(ranks),
            "rank",
        )
    nodes = rank_nodes(view.manifest)
    if 1 < len(set(nodes.values())) <= MAX_LANES and all(r in nodes for r in ranks):
        order = sorted(set(nodes.values()))
        index = {n: i for i, n in enumerate(order)}
        members = {n: [r for r in ranks if nodes[r] == n] for n in order}
        labels = [f"node {n} (ranks {format_ranks(members[n])})" for n in order]
        return {r: index[nodes[r]] for r in ranks}, labels, [len(members[n]) for n in order], "node"
    block = -(-len(ranks) // MAX_LANES)
    lane = {r: i // block for i, r in enumerate(ranks)}
    lanes = sorted(set(lane.values()))
    labels = [f"ranks {format_ranks([r for r in ranks if lane[r] == k])}" for k in lanes]
    sizes = [sum(1 for r in ranks if lane[r] == k) for k in lanes]
    return lane, labels, sizes, "ranks"


def lanes(view: RunView, steps: list[int]) -> Lanes | None:
    """The ops and step windows of ``steps`` in ``view``, by lane (None without steps)."""
    if not steps:
        return None
    chosen = ", ".join(str(int(s)) for s in steps)
    windows = view.sql(
        f"SELECT rank, step, t_start_ns, t_end_ns FROM steps WHERE step IN ({chosen})"
    )
    if not windows.num_rows:
        return None
    ops = view.step_events(["rank", "op", "role", "t_issue_ns", "t_end_ns"], list(steps))
    t0 = int(np.min(windows.column("t_start_ns").to_numpy()))
    lane, labels, sizes, by = _lane_of(view)

    def lanes_of(table: pa.Table) -> pa.Array:
        return pa.array([lane.get(int(r), 0) for r in table.column("rank").to_pylist()], pa.int32())

    def seconds(table: pa.Table, col: str) -> pa.Array:
        return pa.array((table.column(col).to_numpy().astype(np.int64) - t0) / 1e9, pa.float64())

    return Lanes(
        steps=list(steps),
        ops=pa.table(
            {
                "lane": lanes_of(ops),
                "op": ops.column("op"),
                "role": ops.column("role"),
                "start_s": seconds(ops, "t_issue_ns"),
                "end_s": seconds(ops, "t_end_ns"),
            }
        ),
        windows=pa.table(
            {
                "lane": lanes_of(windows),
                "step": windows.column("step"),
                "start_s": seconds(windows, "t_start_ns"),
                "end_s": seconds(windows, "t_end_ns"),
            }
        ),
        labels=labels,
        ranks_per_lane=sizes,
        by=by,
    )
