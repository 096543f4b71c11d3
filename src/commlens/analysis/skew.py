"""Cross-rank view of collectives: arrival skew, waiting vs transfer, stragglers.

A collective instance is matched across the ranks of its group by
(``pg_name``, ``op``, k): the k-th call of that op on that group in each
rank, in sequence order. For each instance, with arrivals ``t_issue`` on
rank 0's clock:

- skew = last arrival − first arrival;
- a rank's queued time = its latency − its service time on the group's queue
  (:func:`commlens.analysis.matched.queues.queue_service`): async ops queued on one
  group wait for a free server, and ops served at once share it;
- its wait for peers = the latest service start over the group's members −
  own service start, clamped to ``[0, own service time]``;
- its transfer = the rest of its service time;

so queued + wait + transfer = the rank's latency ``t_end − t_issue``, exactly,
and none is negative. Where the clocks' skew exceeds the measurement (peers
seen ready only after the call ended: a broadcast root whose send is
buffered, or clock-alignment error), the wait is cut to the service time and
the transfer is 0; ``clamped`` counts those calls and the report says so.
Point-to-point ops, single-rank groups, groups that include a missing rank
and instances that not every member of the group recorded are left out.
The matching (:mod:`commlens.analysis.matching`) runs in numpy over the
per-rank arrays of the rank pass; each table here reads the pass's
``matched`` value (``rank_pass(..., match=True)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from commlens.analysis import spill
from commlens.analysis.matching import Matched, split
from commlens.analysis.rankpass import P2P_OPS, Source, rank_pass

__all__ = ["P2P_OPS", "matched_events", "skew_by_step", "skew_table", "straggler_table"]


def _matched(run: Source) -> Matched:
    matched = rank_pass(run, match=True).matched
    assert matched is not None
    return matched


def matched_events(run: Source) -> pa.Table:
    """Every matched event with its instance's first/last arrival, wait and transfer
    (one row per event: meant for small runs and tests)."""
    mt = _matched(run)
    parts = mt.parts
    inst = mt.inst
    if not parts and inst.first.size:
        raise ValueError(
            f"the run was matched a chunk of steps at a time (more than {spill.CHUNK_EVENTS:,} "
            "events): its matched events are not kept one by one"
        )
    last_rank = np.full(inst.first.size, -1, np.int64)
    tables = []
    for part in sorted(parts, key=lambda p: -p.rank):  # the lowest rank at the last arrival wins
        ids = inst.ids(part)
        at_last = part.t_issue == inst.last[ids]
        last_rank[ids[at_last]] = part.rank
    for part in parts:
        sp = split(part, inst)
        ids, ok = sp.ids, sp.ok
        issue, end = part.t_issue[ok], part.t_end[ok]
        first, last = inst.first[ids], inst.last[ids]
        names = [mt.triples[t] for t in part.triple[ok].tolist()]
        tables.append(
            pa.table(
                {
                    "rank": pa.array(np.full(ids.size, part.rank), pa.int32()),
                    "seq": pa.array(part.seq[ok], pa.int64()),
                    "op": pa.array([n[0] for n in names], pa.string()),
                    "pg_name": pa.array([n[1] for n in names], pa.string()),
                    "role": pa.array([n[2] for n in names], pa.string()),
                    "step": pa.array(part.step[ok], pa.int32()),
                    "k": pa.array(part.k[ok] + 1, pa.int64()),
                    "t_issue_ns": pa.array(issue),
                    "t_end_ns": pa.array(end),
                    "duration_s": pa.array((end - issue) / 1e9),
                    "first_ns": pa.array(first),
                    "last_ns": pa.array(last),
                    "last_rank": pa.array(last_rank[ids], pa.int64()),
                    "skew_s": pa.array((last - first) / 1e9),
                    "t_start_ns": pa.array(part.t_start[ok]),
                    "queue_s": pa.array(sp.queue / 1e9),
                    "wait_last_s": pa.array(sp.wait / 1e9),
                    "transfer_s": pa.array(sp.transfer / 1e9),
                    "clamped": pa.array(sp.clamped),
                    "lateness_s": pa.array((issue - first) / 1e9),
                }
            )
        )
    if not tables:
        return pa.table({"rank": pa.array([], pa.int32())})
    return pa.concat_tables(tables).sort_by(
        [("pg_name", "ascending"), ("op", "ascending"), ("k", "ascending"), ("rank", "ascending")]
    )


def skew_table(run: Source) -> pa.Table:
    """Per (op, group, role): instances, skew statistics, queued vs wait vs transfer time
    (they add up to ``time_s``), and how many calls had their wait clamped."""
    mt = _matched(run)
    inst = mt.inst
    done = inst.complete
    skew = (inst.last[done] - inst.first[done]) / 1e9
    triple = inst.triple[done]
    rows: list[dict[str, Any]] = []
    for code in np.unique(triple).tolist():
        values = skew[triple == code]
        op, pg, role = mt.triples[code]
        time, wait = mt.per_triple["time_s"][code], mt.per_triple["wait_s"][code]
        rows.append(
            {
                "op": op,
                "pg_name": pg,
                "role": role,
                "instances": int(values.size),
                "mean_skew_s": float(values.mean()),
                "p50_skew_s": float(np.quantile(values, 0.5)),
                "p99_skew_s": float(np.quantile(values, 0.99)),
                "max_skew_s": float(values.max()),
                "time_s": float(time),
                "queue_s": float(mt.per_triple["queue_s"][code]),
                "wait_s": float(wait),
                "transfer_s": float(mt.per_triple["transfer_s"][code]),
                "wait_share": float(wait / time) if time > 0 else 0.0,
                "clamped": int(mt.per_triple["clamped"][code]),
            }
        )
    rows.sort(key=lambda r: (-r["wait_s"], r["op"], r["pg_name"]))
    return _table(
        rows,
        {
            "op": pa.string(),
            "pg_name": pa.string(),
            "role": pa.string(),
            "instances": pa.int64(),
            "mean_skew_s": pa.float64(),
            "p50_skew_s": pa.float64(),
            "p99_skew_s": pa.float64(),
            "max_skew_s": pa.float64(),
            "time_s": pa.float64(),
            "queue_s": pa.float64(),
            "wait_s": pa.float64(),
            "transfer_s": pa.float64(),
            "wait_share": pa.float64(),
            "clamped": pa.int64(),
        },
    )


def straggler_table(run: Source) -> pa.Table:
    """Ranks ranked as stragglers: who arrives last, and how long others wait for it.

    ``last_count``: instances where the rank arrived last, strictly after the
    first (ties with everyone do not count); ``blame_s``: the skew of those
    instances (how long the first arriver waited for it); ``mean_lateness_s``:
    mean of own arrival − first arrival.
    """
    pr = _matched(run).per_rank
    rows = [
        {
            "rank": r,
            "instances": int(pr["instances"][r]),
            "last_count": int(pr["last_count"][r]),
            "blame_s": float(pr["blame_s"][r]),
            "mean_lateness_s": float(pr["late_s"][r] / pr["instances"][r]),
            "wait_s": float(pr["wait_s"][r]),
            "transfer_s": float(pr["transfer_s"][r]),
        }
        for r in range(pr["instances"].size)
        if pr["instances"][r]
    ]
    rows.sort(key=lambda r: (-r["blame_s"], -r["mean_lateness_s"], r["rank"]))
    rows = [{"straggler_rank": i + 1, **row} for i, row in enumerate(rows)]
    return _table(
        rows,
        {
            "straggler_rank": pa.int64(),
            "rank": pa.int32(),
            "instances": pa.int64(),
            "last_count": pa.int64(),
            "blame_s": pa.float64(),
            "mean_lateness_s": pa.float64(),
            "wait_s": pa.float64(),
            "transfer_s": pa.float64(),
        },
    )


def skew_by_step(run: Source) -> pa.Table:
    """Per step, summed over ranks: time waiting for the last peer vs transferring."""
    ps = _matched(run).per_step
    steps = np.flatnonzero(ps["seen"])
    return pa.table(
        {
            "step": pa.array(steps, pa.int32()),
            "wait_s": pa.array(ps["wait_s"][steps]),
            "transfer_s": pa.array(ps["transfer_s"][steps]),
            "max_skew_s": pa.array(ps["max_skew_s"][steps]),
        }
    )


def _table(rows: list[dict[str, Any]], schema: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({k: pa.array([r[k] for r in rows], t) for k, t in schema.items()})


def late_ranks(stragglers: pa.Table) -> list[int]:
    """Ranks whose mean lateness stands out from the run's (a :func:`straggler_table`).

    A rank is late when its mean lateness exceeds the median over ranks by more
    than half the median, eight median absolute deviations and 1 µs: jitter
    shared by every rank never qualifies, a rank or node that keeps the others
    waiting does.
    """
    spread = _lateness(stragglers)
    if spread is None:
        return []
    ranks, over, med, mad = spread
    floor = max(0.5 * med, 8 * mad, 1e-6)
    return sorted(int(r) for r, x in zip(ranks, over, strict=True) if x > floor)


def _lateness(stragglers: pa.Table) -> tuple[list[int], np.ndarray, float, float] | None:
    """(the ranks of a :func:`straggler_table`, each one's mean lateness over the median,
    the median, the median absolute deviation); None for fewer than 3 ranks."""
    if stragglers.num_rows < 3:
        return None
    late = np.asarray(stragglers.column("mean_lateness_s").to_numpy(zero_copy_only=False))
    med = float(np.median(late))
    mad = float(np.median(np.abs(late - med)))
    return stragglers.column("rank").to_pylist(), late - med, med, mad


def late_nodes(stragglers: pa.Table, node_of: dict[int, str]) -> list[str]:
    """Nodes (``node_of``: rank -> node) of two or more ranks that are all late together
    (a :func:`straggler_table`).

    A node whose ranks arrive late at every collective is waited for only by the
    collectives across nodes: its ranks' own collectives within the node wait for none
    of them. Their mean lateness is diluted by those, and at many collectives within a
    node (a 1,024-rank run's tensor-parallel groups of 8 on 8-rank nodes) falls under
    :func:`late_ranks`'s floor of half the median. Together they stand out: a node is
    late when every one of its ranks exceeds the median by more than eight median
    absolute deviations and 1 µs (a rank or two late does not make its node late, nor
    one rank alone on its node).
    """
    spread = _lateness(stragglers)
    if spread is None:
        return []
    ranks, excess, _, mad = spread
    floor = max(8 * mad, 1e-6)
    over = {int(r): x > floor for r, x in zip(ranks, excess, strict=True)}
    members: dict[str, list[int]] = {}
    for rank, node in node_of.items():
        members.setdefault(node, []).append(rank)
    return sorted(
        node
        for node, mine in members.items()
        if len(mine) > 1 and all(over.get(r, False) for r in mine)
    )
