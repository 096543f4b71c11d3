"""Cross-rank view of collectives: arrival skew, waiting vs transfer, stragglers.

A collective instance is matched across the ranks of its group by
(``pg_name``, ``op``, k): the k-th call of that op on that group in each
rank, in sequence order. For each instance, with arrivals ``t_issue`` on
rank 0's clock:

- skew = last arrival − first arrival;
- a rank's wait for the last peer = last arrival − own arrival;
- its transfer = own ``t_end`` − last arrival;

so wait + transfer = the rank's latency ``t_end − t_issue``, exactly. An op
that does not hold every rank until all arrive (a broadcast root whose send
is buffered, say) can finish before the last peer arrives: its transfer is
then negative and its wait longer than its latency, still summing exactly.
Point-to-point ops, single-rank groups, groups that include a missing rank
and instances that not every member of the group recorded are left out.
The matching runs in numpy over the per-rank arrays of
:mod:`commlens.analysis.rankpass`, without sorting all events: each instance
gets a dense id (offset of its (group, op) pair + k), and arrivals are
gathered by scattering each rank's calls onto those ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.analysis.codes import dense_codes
from commlens.analysis.rankpass import P2P_OPS, MatchPart, ensure_pass
from commlens.analysis.source import RunView, accepts_run

__all__ = ["P2P_OPS", "matched_events", "skew_by_step", "skew_table", "straggler_table"]


@dataclass
class Instances:
    """Every collective instance (dense ids), with its arrivals, built without a sort."""

    offset: dict[int, int]  # (group, op) code -> id of its first instance
    first: np.ndarray
    last: np.ndarray
    complete: np.ndarray
    triple: np.ndarray

    def ids(self, part: MatchPart) -> np.ndarray:
        if not part.pair.size:
            return part.k
        pairs, inverse = dense_codes(part.pair)
        starts = np.array([self.offset[int(p)] for p in pairs.tolist()], np.int64)
        return starts[inverse] + part.k


def _instances(parts: list[MatchPart]) -> Instances:
    count_per_pair: dict[int, int] = {}
    for part in parts:  # k counts calls per pair: the instances of a pair = most calls
        if not part.pair.size:
            continue
        pairs, inverse = dense_codes(part.pair)
        for value, n in zip(pairs.tolist(), np.bincount(inverse).tolist(), strict=True):
            count_per_pair[value] = max(count_per_pair.get(value, 0), n)
    offset, total = {}, 0
    for value in sorted(count_per_pair):
        offset[value] = total
        total += count_per_pair[value]
    first = np.full(total, np.iinfo(np.int64).max, np.int64)
    last = np.full(total, np.iinfo(np.int64).min, np.int64)
    seen = np.zeros(total, np.int64)
    size = np.zeros(total, np.int64)
    triple = np.zeros(total, np.int32)
    inst = Instances(offset, first, last, seen, triple)
    for part in parts:  # ids are unique within a rank: plain fancy indexing is safe
        ids = inst.ids(part)
        first[ids] = np.minimum(first[ids], part.t_issue)
        last[ids] = np.maximum(last[ids], part.t_issue)
        seen[ids] += 1
        size[ids] = part.size
        triple[ids] = part.triple
    inst.complete = (seen == size) & (seen > 0)
    return inst


@dataclass
class Matched:
    """Aggregates of the matched events (complete instances only)."""

    inst: Instances
    triples: list[tuple[str, str, str]]
    per_triple: dict[str, np.ndarray]
    per_rank: dict[str, np.ndarray]
    per_step: dict[str, np.ndarray]


def _matched(run: RunView) -> Matched:
    cached: Matched | None = run.cache.get("matched")
    if cached is not None:
        return cached
    rp = ensure_pass(run, match=True)
    parts = rp.matches
    assert parts is not None
    inst = _instances(parts)
    n_tri = len(rp.triples)
    n_rank = max((p.rank for p in parts), default=-1) + 1
    n_step = max((int(p.step.max()) + 1 for p in parts if p.step.size), default=0)
    per_triple = {k: np.zeros(n_tri) for k in ("time_s", "wait_s", "transfer_s")}
    per_rank = {
        k: np.zeros(n_rank)
        for k in ("instances", "last_count", "blame_s", "late_s", "wait_s", "transfer_s")
    }
    per_step = {k: np.zeros(n_step) for k in ("wait_s", "transfer_s", "max_skew_s")}
    per_step["seen"] = np.zeros(n_step)
    for part in parts:
        ids = inst.ids(part)
        ok = inst.complete[ids]
        ids, issue, end = ids[ok], part.t_issue[ok], part.t_end[ok]
        first, last = inst.first[ids], inst.last[ids]
        tri, step, r = part.triple[ok], np.maximum(part.step[ok], 0), part.rank
        wait, transfer, skew = (last - issue) / 1e9, (end - last) / 1e9, (last - first) / 1e9
        per_triple["time_s"] += np.bincount(tri, (end - issue) / 1e9, n_tri)
        per_triple["wait_s"] += np.bincount(tri, wait, n_tri)
        per_triple["transfer_s"] += np.bincount(tri, transfer, n_tri)
        at_last = issue == last
        per_rank["instances"][r] += ids.size
        per_rank["last_count"][r] += np.count_nonzero(at_last & (last > first))
        per_rank["blame_s"][r] += skew[at_last].sum()
        per_rank["late_s"][r] += ((issue - first) / 1e9).sum()
        per_rank["wait_s"][r] += wait.sum()
        per_rank["transfer_s"][r] += transfer.sum()
        per_step["wait_s"] += np.bincount(step, wait, n_step)
        per_step["transfer_s"] += np.bincount(step, transfer, n_step)
        per_step["seen"] += np.bincount(step, minlength=n_step)
        np.maximum.at(per_step["max_skew_s"], step, skew)
    result = Matched(inst, rp.triples, per_triple, per_rank, per_step)
    run.cache["matched"] = result
    return result


@accepts_run
def matched_events(run: RunView) -> pa.Table:
    """Every matched event with its instance's first/last arrival, wait and transfer
    (one row per event: meant for small runs and tests)."""
    mt = _matched(run)
    parts = ensure_pass(run, match=True).matches
    assert parts is not None
    inst = mt.inst
    last_rank = np.full(inst.first.size, -1, np.int64)
    tables = []
    for part in sorted(parts, key=lambda p: -p.rank):  # the lowest rank at the last arrival wins
        ids = inst.ids(part)
        at_last = part.t_issue == inst.last[ids]
        last_rank[ids[at_last]] = part.rank
    for part in parts:
        ids = inst.ids(part)
        ok = inst.complete[ids]
        ids, issue, end = ids[ok], part.t_issue[ok], part.t_end[ok]
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
                    "wait_last_s": pa.array((last - issue) / 1e9),
                    "transfer_s": pa.array((end - last) / 1e9),
                    "lateness_s": pa.array((issue - first) / 1e9),
                }
            )
        )
    if not tables:
        return pa.table({"rank": pa.array([], pa.int32())})
    return pa.concat_tables(tables).sort_by(
        [("pg_name", "ascending"), ("op", "ascending"), ("k", "ascending"), ("rank", "ascending")]
    )


@accepts_run
def skew_table(run: RunView) -> pa.Table:
    """Per (op, group, role): instances, skew statistics, wait vs transfer time."""
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
                "wait_s": float(wait),
                "transfer_s": float(mt.per_triple["transfer_s"][code]),
                "wait_share": float(wait / time) if time > 0 else 0.0,
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
            "wait_s": pa.float64(),
            "transfer_s": pa.float64(),
            "wait_share": pa.float64(),
        },
    )


@accepts_run
def straggler_table(run: RunView) -> pa.Table:
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


@accepts_run
def skew_by_step(run: RunView) -> pa.Table:
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
