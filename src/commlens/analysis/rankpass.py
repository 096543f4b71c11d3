"""One pass over every rank's events, in numpy: what SQL window functions make slow.

Each rank's events are read once (only the needed columns, strings
dictionary-encoded, straight from its Parquet file) and give:

- per step: the union of the op intervals ``[t_issue, t_end]`` (overlapping
  async ops count once) and of the blocked intervals ``[t_end − t_wait,
  t_end]``, op count, bytes, summed durations, first issue and last end
  (:mod:`commlens.analysis.timeline`);
- the per-rank group aggregates behind the op, size, phase and module tables
  (:mod:`commlens.analysis.rankagg`), and each group's size and ranks;
- wire bytes per time bin (ring convention), spread evenly over each op;
- for cross-rank matching, each collective's key (group, op, k-th call),
  matched by :mod:`commlens.analysis.skew`.

Memory stays at one rank's columns plus the small results (and, for
matching, a few numbers per collective call). Results are cached on the
:class:`RunView` (see :func:`ensure_pass`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.analysis.bandwidth import bus_factor
from commlens.analysis.codes import Codes, dense_codes
from commlens.analysis.rankagg import RunGroups, learn_groups, rank_aggregate
from commlens.analysis.source import RankDamaged, RunView
from commlens.analysis.timeline import segments, spread, step_rows

P2P_OPS = ("send", "recv", "send_object", "recv_object")
_COLUMNS = [
    "seq",
    "op",
    "pg_name",
    "role",
    "group_size",
    "step",
    "size_bytes",
    "t_issue_ns",
    "t_end_ns",
    "t_wait_ns",
    "duration_s",
    "phase",
    "module",
]


@dataclass
class MatchPart:
    """One rank's collective calls that can be matched across ranks."""

    rank: int
    pair: np.ndarray  # global (group, op) code
    k: np.ndarray  # 0-based: the k-th call of that op on that group in this rank
    triple: np.ndarray  # global (op, group, role) code
    seq: np.ndarray
    step: np.ndarray
    size: np.ndarray  # group size
    t_issue: np.ndarray
    t_end: np.ndarray


@dataclass
class RankPass:
    steps: pa.Table
    util: pa.Table | None
    matches: list[MatchPart] | None
    triples: list[tuple[str, str, str]]
    agg: pa.Table
    groups: pa.Table
    util_bins: int | None


def _kth(code: np.ndarray) -> np.ndarray:
    """For each row, how many earlier rows have the same code (0-based)."""
    k = np.empty(code.size, np.int64)
    uniq = _uniques(code)
    if uniq.size <= 64:  # the usual case: a few (group, op) pairs; no sort needed
        for value in uniq.tolist():
            idx = np.flatnonzero(code == value)
            k[idx] = np.arange(idx.size)
        return k
    order = np.argsort(code, kind="stable")
    starts = segments(code[order])
    lengths = np.diff(np.append(starts, code.size))
    k[order] = np.arange(code.size) - np.repeat(starts, lengths)
    return k


def _uniques(values: np.ndarray) -> np.ndarray:
    return dense_codes(values)[0]


def ensure_pass(run: RunView, *, util_bins: int | None = None, match: bool = False) -> RankPass:
    """The pass over ``run`` for what is asked, computed once (cached on ``run``).

    Callers that need several parts should ask for all of them in the first
    call (``build_report`` does), so the events are read once.
    """
    cached: RankPass | None = run.cache.get("rank_pass")
    if cached is not None:
        if (util_bins is None or cached.util_bins == util_bins) and (
            not match or cached.matches is not None
        ):
            return cached
        util_bins = util_bins or cached.util_bins
        match = match or cached.matches is not None
    while True:  # again without a rank whose file turned out damaged while read
        try:
            result = _run_pass(run, util_bins, match)
        except RankDamaged:
            continue
        run.cache["rank_pass"] = result
        return result


def _run_pass(run: RunView, util_bins: int | None, match: bool) -> RankPass:
    rows = run.con.execute("SELECT rank FROM ranks WHERE status <> 'missing' ORDER BY rank")
    ranks = [int(r[0]) for r in rows.fetchall()]
    t0, t1 = run.time_span() or (0, 0)
    n_bins = max(1, util_bins or 1)
    bin_ns = max(1, -(-max(t1 - t0, 1) // n_bins))
    n_bins_total = max(t1 - t0, 0) // bin_ns + 1
    names = {k: Codes() for k in ("op", "pg_name", "role", "phase", "module")}
    ops, groups, triples = names["op"], names["pg_name"], Codes()
    info = RunGroups()
    excluded = _groups_touching(run)
    step_parts: list[dict[str, np.ndarray]] = []
    util_parts: list[tuple[int, np.ndarray]] = []
    agg_parts: list[pa.Table] = []
    matches: list[MatchPart] = []
    for rank in ranks:
        t = run.read_rank(rank, _COLUMNS)
        if not t.num_rows:
            continue
        order = _rows_in_seq_order(t, run.steps)  # file rows kept, in seq order
        if order is not None:
            if not order.size:
                continue
            t = t.take(pa.array(order))
        seq = t.column("seq").to_numpy()
        codes = {k: c.encode(t.column(k)) for k, c in names.items()}
        op, pg, role = codes["op"], codes["pg_name"], codes["role"]
        gsize = pc.fill_null(t.column("group_size"), 1).to_numpy()
        step = pc.fill_null(t.column("step"), 0).to_numpy()
        size = pc.fill_null(t.column("size_bytes"), 0).to_numpy()
        s = t.column("t_issue_ns").to_numpy()
        e = t.column("t_end_ns").to_numpy()
        wait = pc.fill_null(t.column("t_wait_ns"), 0).to_numpy()
        duration = pc.fill_null(t.column("duration_s"), 0.0).to_numpy()
        learn_groups(info, groups, pg, gsize, _pg_ranks_reader(run, rank, order))
        agg_parts.append(rank_aggregate(rank, names, codes, size, duration, wait))
        step_parts.append(step_rows(rank, step, s, e, wait, size))
        if util_bins:
            factor = _factors(op, gsize, ops.values)
            util_parts.append((rank, spread(s, e, size * factor, t0, bin_ns, n_bins_total)))
        if match:
            p2p = np.isin(op, [ops.index[o] for o in P2P_OPS if o in ops.index])
            bad = np.isin(pg, [groups.index[g] for g in excluded if g in groups.index])
            keep = ~p2p & ~bad & (gsize > 1)
            pair = pg[keep].astype(np.int64) * 4096 + op[keep]  # global codes: same on all ranks
            matches.append(
                MatchPart(
                    rank=rank,
                    pair=pair,
                    k=_kth(pair).astype(np.int32),
                    triple=_triple_codes(triples, op[keep], pg[keep], role[keep]),
                    seq=seq[keep],
                    step=step[keep].astype(np.int32),
                    size=gsize[keep],
                    t_issue=s[keep],
                    t_end=e[keep],
                )
            )
    split = [tuple(v.split("\x00")) for v in triples.values]
    triple_names = [
        (ops.values[int(a)], groups.values[int(b)], names["role"].values[int(c)])
        for a, b, c in split
    ]
    return RankPass(
        steps=_steps_table(step_parts),
        util=_util_table(util_parts, bin_ns) if util_bins else None,
        matches=matches if match else None,
        triples=triple_names,
        util_bins=util_bins,
        agg=pa.concat_tables(agg_parts) if agg_parts else _empty_agg(),
        groups=info.table(),
    )


def _rows_in_seq_order(
    t: pa.Table, steps: tuple[int | None, int | None] | None
) -> np.ndarray | None:
    """File rows to keep (those in ``steps``), in seq order; None: all, as they are."""
    seq = t.column("seq").to_numpy()
    order = None
    if seq.size > 1 and np.any(seq[1:] < seq[:-1]):
        order = np.argsort(seq, kind="stable")
    if steps is not None:
        step = pc.fill_null(t.column("step"), 0).to_numpy()
        keep = np.ones(step.size, bool)
        if steps[0] is not None:
            keep &= step >= steps[0]
        if steps[1] is not None:
            keep &= step < steps[1]
        if not keep.all():
            order = np.flatnonzero(keep) if order is None else order[keep[order]]
    return order


def _pg_ranks_reader(
    run: RunView, rank: int, order: np.ndarray | None
) -> Callable[[list[int]], list[Any]]:
    """Reads ``pg_ranks`` at rows of the seq-ordered table (mapped back to file rows)."""

    def read(rows: list[int]) -> list[Any]:
        file_rows = [int(order[r]) for r in rows] if order is not None else rows
        return run.read_values(rank, "pg_ranks", file_rows)

    return read


def _empty_agg() -> pa.Table:
    return pa.table(
        {
            "rank": pa.array([], pa.int32()),
            "op": pa.array([], pa.string()),
            "pg_name": pa.array([], pa.string()),
            "role": pa.array([], pa.string()),
            "size_bucket_bytes": pa.array([], pa.int64()),
            "phase": pa.array([], pa.string()),
            "module": pa.array([], pa.string()),
            "count": pa.array([], pa.int64()),
            "bytes": pa.array([], pa.int64()),
            "time_s": pa.array([], pa.float64()),
            "wait_s": pa.array([], pa.float64()),
        }
    )


def _triple_codes(codes: Codes, op: np.ndarray, pg: np.ndarray, role: np.ndarray) -> np.ndarray:
    """Global codes of (op, group, role), through small dense intermediate codes."""
    if not op.size:
        return np.empty(0, np.int32)
    pairs, pair_idx = dense_codes(pg.astype(np.int64) * 4096 + op)
    combos, inverse = dense_codes(pair_idx * 4096 + role)
    lookup = np.array(
        [
            codes.code(f"{pairs[c // 4096] % 4096}\x00{pairs[c // 4096] // 4096}\x00{c % 4096}")
            for c in combos.tolist()
        ],
        np.int32,
    )
    return lookup[inverse]


def _factors(op: np.ndarray, gsize: np.ndarray, names: list[str]) -> np.ndarray:
    combo = op.astype(np.int64) * 65536 + np.minimum(gsize, 65535)
    uniq, inverse = dense_codes(combo)
    lookup = np.array([bus_factor(names[u // 65536], u % 65536) for u in uniq.tolist()])
    return lookup[inverse] if combo.size else np.zeros(0)


def _groups_touching(run: RunView) -> list[str]:
    """Groups that include a missing rank (left out of cross-rank figures)."""
    if not run.missing_ranks:
        return []
    missing = set(run.missing_ranks)
    groups = run.sql("SELECT pg_name, any_value(pg_ranks) AS pg_ranks FROM events GROUP BY pg_name")
    return [
        str(row["pg_name"])
        for row in groups.to_pylist()
        if not missing.isdisjoint(row["pg_ranks"] or ())
    ]


def _steps_table(parts: list[dict[str, np.ndarray]]) -> pa.Table:
    cols: dict[str, Any] = {
        "rank": pa.int32(),
        "step": pa.int32(),
        "ops": pa.int64(),
        "bytes": pa.int64(),
        "comm_s": pa.float64(),
        "comm_sum_s": pa.float64(),
        "exposed_s": pa.float64(),
        "first_ns": pa.int64(),
        "last_ns": pa.int64(),
    }
    return pa.table(
        {
            name: pa.array(np.concatenate([p[name] for p in parts]) if parts else [], typ)
            for name, typ in cols.items()
        }
    )


def _util_table(parts: list[tuple[int, np.ndarray]], bin_ns: int) -> pa.Table:
    ranks, t_s, wire = [], [], []
    for rank, per_bin in parts:
        ranks.append(np.full(per_bin.size, rank, np.int32))
        t_s.append(np.arange(per_bin.size) * bin_ns / 1e9)
        wire.append(per_bin)
    w = np.concatenate(wire) if wire else np.zeros(0)
    return pa.table(
        {
            "rank": pa.array(np.concatenate(ranks) if ranks else [], pa.int32()),
            "t_s": pa.array(np.concatenate(t_s) if t_s else [], pa.float64()),
            "bin_s": pa.array(np.full(w.size, bin_ns / 1e9), pa.float64()),
            "wire_bytes": pa.array(w, pa.float64()),
            "gbit_s": pa.array(w * 8 / (bin_ns / 1e9) / 1e9, pa.float64()),
        }
    )
