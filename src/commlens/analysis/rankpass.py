"""One pass over every rank's events, in numpy: what SQL window functions make slow.

Each rank's events are read once (only the needed columns, strings
dictionary-encoded, straight from its Parquet file) and give:

- each op's service time on its group's queue (async ops queued on one group
  wait for a free server: one on a CUDA stream, gloo's two worker threads on a
  gloo-only run; ops served at once share the time; the service times of a
  group's ops add up to the union of their intervals, see
  :func:`commlens.analysis.matched.queues.queue_service`);
- per step: the union of the op intervals ``[t_issue, t_end]`` (overlapping
  async ops count once) and of the blocked intervals ``[t_end − t_wait,
  t_end]``, op count, bytes, summed durations, first issue and last end
  (:mod:`commlens.analysis.timeline`);
- the per-rank group aggregates behind the op, size, phase and module tables
  (:mod:`commlens.analysis.rankagg`), and each group's size and ranks;
- wire bytes per time bin (ring convention), spread evenly over each op;
- for cross-rank matching, each collective's key (group, op, k-th call),
  matched by :mod:`commlens.analysis.matching`.

The result is a plain value, :class:`RankPass` (frozen): its tables plus the
few facts of the run the analyses use. Every analysis is a function of it:

    with open_run("runs/x") as view:
        rp = rank_pass(view, util_bins=100, match=True, quantiles=True)
    op_table(rp), step_table(rp), skew_table(rp)

An analysis also takes a :class:`RunView`, a loaded :class:`Run` or a run
directory, and then makes the pass it needs (:func:`rank_pass` of it): for
several tables of one run, make the pass once. Memory stays at one rank's columns
plus the small results; for matching and the latency percentiles, a few numbers per
collective call on a run of up to :data:`commlens.analysis.spill.CHUNK_EVENTS` events,
and on a larger one the calls and latencies written to disk as each rank is read and
matched a chunk of steps at a time (:mod:`commlens.analysis.matchchunks`; about 30
bytes a collective instance stay in memory).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.analysis.bandwidth import bus_factor
from commlens.analysis.codes import Codes, dense_codes
from commlens.analysis.internode import InterNode, nic_rates, sampling_interval
from commlens.analysis.matchchunks import TRIPLE, CallSpill, Coded, match_spilled, spill_calls
from commlens.analysis.matched.intervals import Windows, windows_by_rank
from commlens.analysis.matched.match import kth
from commlens.analysis.matched.ops import in_steps, pg_ranks_reader, rank_rows, run_size
from commlens.analysis.matched.queues import queue_service
from commlens.analysis.matched.run import check_clocks
from commlens.analysis.matching import Matched, MatchPart, Triple, compact, match_calls
from commlens.analysis.parallel import detach, in_worker, map_chunks
from commlens.analysis.quantiles import VALUE, LatencyQuantiles
from commlens.analysis.rankagg import (
    RunGroups,
    learn_groups,
    rank_aggregate,
    size_bucket,
    split_aggregate,
)
from commlens.analysis.spill import Spill, chunk_width, spill_dir
from commlens.analysis.timeline import spread, step_rows
from commlens.optable import P2P_OPS, backend
from commlens.trace.layout import NIC_FILE
from commlens.trace.nic import read_nic
from commlens.trace.reader import RankDamaged, Run, RunView, StepRange, open_run

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
    "peer",
]


@dataclass(frozen=True)
class RankPass:
    """What the analyses read from a run: the pass's tables and a few facts of the run.

    ``made`` says which optional parts were computed: ``util`` (wire bytes in
    ``util_bins`` time bins), ``match`` (the matched collectives), ``quantiles``
    (latency percentiles per op, group, role and size bucket) and ``nic`` (the
    NIC counters, None when the run has none).
    """

    path: Path
    manifest: dict[str, Any]
    world_size: int
    missing_ranks: tuple[int, ...]
    step_range: StepRange | None
    """The steps the run was opened with (see :func:`commlens.trace.open_run`)."""
    windows: pa.Table
    """The run's ``steps`` view: recorded step windows per rank, on rank 0's clock."""
    span: tuple[int, int] | None
    """(first issue, last end) over the events; None without events."""
    steps: pa.Table
    """Per (rank, step): ops, bytes, comm_s, comm_sum_s, exposed_s, first_ns, last_ns."""
    agg: pa.Table
    """Per (rank, op, pg_name, role, size bucket, phase, module): count, bytes, time_s,
    wait_s, service_s (see :mod:`commlens.analysis.rankagg`)."""
    groups: pa.Table
    """Per group: pg_name, group_size, pg_ranks."""
    made: frozenset[str] = frozenset()
    util_bins: int | None = None
    util: pa.Table | None = None
    inter: pa.Table | None = None
    """With ``util``, on a run of two nodes or more: per node and time bin the wire bytes
    its ranks send to other nodes (:class:`commlens.analysis.internode.InterNode`), in
    bins of the NIC counters' sampling interval when the pass read them (``nic``), else
    of ``util``'s bins."""
    matched: Matched | None = None
    quantiles: pa.Table | None = None
    nic: pa.Table | None = None
    head: RankPass | None = None
    """With ``rank_pass(..., headline=steps)``: the same pass over those steps only
    (steps, windows, aggregates and matching; no utilization, quantiles or NIC)."""

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)


Source: TypeAlias = "RankPass | RunView | Run | str | Path"
"""What an analysis takes: a pass, or a run to make one of (:func:`rank_pass`)."""


def rank_pass(
    source: Source,
    *,
    util_bins: int | None = None,
    match: bool = False,
    quantiles: bool = False,
    nic: bool = False,
    headline: StepRange | None = None,
) -> RankPass:
    """The pass over the run ``source`` (a view, a loaded Run or a directory) for what
    is asked (see :class:`RankPass`); ``source`` itself when it is a pass holding it.
    ``headline``: steps ``[first, stop)`` whose own pass to make alongside, as ``head``.

    A rank whose file turns out damaged while read is left out of the view,
    and the pass made again without it.
    """
    asked = {"util": bool(util_bins), "match": match, "quantiles": quantiles, "nic": nic}
    made = frozenset(name for name, want in asked.items() if want)
    if isinstance(source, RankPass):
        lacking = sorted(made - source.made)
        if util_bins and source.util_bins != util_bins:
            lacking.append(f"util_bins={util_bins}")
        if headline is not None and (source.head is None or source.head.step_range != headline):
            lacking.append(f"headline={headline}")
        if lacking:
            raise ValueError(f"the rank pass was made without {', '.join(lacking)}")
        return source
    if not isinstance(source, RunView):
        with open_run(source) as view:
            return _pass_over(view, made, util_bins, headline)
    return _pass_over(source, made, util_bins, headline)


def _pass_over(
    view: RunView, made: frozenset[str], util_bins: int | None, headline: StepRange | None
) -> RankPass:
    check_clocks(view)  # the times every command sees (whatif's too)
    nic = None
    if "nic" in made:
        path = view.path / NIC_FILE
        nic = read_nic(path) if path.is_file() else None
    inter_bin = sampling_interval(nic_rates(nic, None)) if nic is not None else None
    while True:
        missing = list(view.missing_ranks)
        try:
            result = _run_pass(
                view, util_bins, "match" in made, headline, "quantiles" in made, inter_bin
            )
        except RankDamaged:
            continue
        if view.missing_ranks == missing:  # no rank dropped while the SQL ran
            break
    if "nic" in made:
        result = replace(result, nic=nic)
    head = result.head
    if head is not None:
        head = replace(head, made=made & {"match"})
    return replace(result, made=made, head=head)


@dataclass(frozen=True)
class _Setup:
    """What every rank's part of the pass needs to know of the run."""

    util_bins: int | None
    match: bool
    headline: StepRange | None
    quantiles: bool
    t0: int
    bin_ns: int
    n_bins: int
    inter: InterNode | None
    excluded: list[str]
    workers: int
    """The backend's servers per group queue (gloo: 2)."""
    by_rank: dict[int, Windows]
    spill: Path | None = None
    """Where the calls to match are written, a chunk of ``width`` steps a file
    (:mod:`commlens.analysis.matchchunks`); None: they are kept in memory."""
    width: int = 1


@dataclass
class _Chunk:
    """The pass over a chunk of ranks, in rank order: codes are the chunk's own
    (``names``), strings wherever the parts leave this module."""

    names: dict[str, Codes]
    groups: RunGroups = field(default_factory=RunGroups)
    agg: list[pa.Table] = field(default_factory=list)
    steps: list[dict[str, np.ndarray]] = field(default_factory=list)
    util: list[tuple[int, np.ndarray]] = field(default_factory=list)
    inter: list[tuple[int, np.ndarray | None]] = field(default_factory=list)
    lat: LatencyQuantiles = field(default_factory=LatencyQuantiles)
    calls: list[tuple[int, dict[str, np.ndarray]]] = field(default_factory=list)
    """Each rank's collective calls to match (op, pg_name and role in chunk codes)."""
    spilled: CallSpill | None = None
    """The calls to match, written to disk (a run larger than a chunk of steps)."""
    problems: list[str] = field(default_factory=list)
    damaged: tuple[int, str] | None = None
    """A rank whose file turned out damaged in a worker (the pass is made again)."""


RANKS_A_WORKER = 64
"""Fewer ranks than this a worker process and the pass runs in one process."""


def _run_pass(
    run: RunView,
    util_bins: int | None,
    match: bool,
    headline: StepRange | None,
    quantiles: bool = False,
    inter_bin: float | None = None,
) -> RankPass:
    """The pass; ``inter_bin``: the inter-node bins' length in seconds (None: the
    utilization's). Ranks are read in chunks (:func:`commlens.analysis.parallel.map_chunks`)
    and the chunks merged in rank order."""
    ranks = run.ranks
    span = run.time_span()
    t0, t1 = span or (0, 0)
    n_bins = max(1, util_bins or 1)
    bin_ns = max(1, -(-max(t1 - t0, 1) // n_bins))
    windows = run.sql("SELECT * FROM steps")
    setup = _Setup(
        util_bins=util_bins,
        match=match,
        headline=headline,
        quantiles=quantiles,
        t0=t0,
        bin_ns=bin_ns,
        n_bins=max(t1 - t0, 0) // bin_ns + 1,
        inter=(
            InterNode.of(run.manifest, span, inter_bin or bin_ns / 1e9)
            if util_bins and span is not None
            else None
        ),
        excluded=_groups_touching(run),
        workers=backend(run.manifest.get("backend")).workers,
        by_rank=windows_by_rank(windows),
    )
    with ExitStack() as stack:
        width = chunk_width(*run_size(run)) if match or quantiles else None
        if width is not None:
            setup = replace(setup, spill=stack.enter_context(spill_dir()), width=width)
        parts = map_chunks(partial(_pass_chunk, run, setup), ranks, least=RANKS_A_WORKER)
        return _merged(run, setup, parts, (span, bin_ns, windows))


def _merged(
    run: RunView, setup: _Setup, parts: list[_Chunk], facts: tuple[Any, int, pa.Table]
) -> RankPass:
    """The pass of the chunks of ranks ``parts`` (in rank order); ``facts``: the run's span,
    the utilization's bin and the step windows."""
    span, bin_ns, windows = facts
    util_bins, match, headline, quantiles = (
        setup.util_bins, setup.match, setup.headline, setup.quantiles
    )  # fmt: skip
    names = {k: Codes() for k in _NAMED}
    info = RunGroups()
    lat = LatencyQuantiles()
    for part in parts:  # rank order
        for line in part.problems:
            run.note_problem(line)
        if part.damaged is not None:
            rank, reason = part.damaged
            raise RankDamaged(rank, run.drop_rank(rank, reason))
        for k, codes in part.names.items():
            for value in codes.values:
                names[k].code(value)
        for name, size in part.groups.size.items():
            if name not in info.size:
                info.size[name] = size
                info.ranks[name] = part.groups.ranks[name]
        lat.merge(part.lat)
    if setup.inter is not None:
        for part in parts:
            for rank, bins in part.inter:
                setup.inter.add(rank, bins)
    agg_parts = [t for part in parts for t in part.agg]
    if len(parts) > 1:  # each rank's rows in the order of the run's codes, as in one process
        agg_parts = [_in_run_order(t, names) for t in agg_parts]
    agg = pa.concat_tables(agg_parts) if agg_parts else _empty_agg()
    result = RankPass(
        path=run.path,
        manifest=run.manifest,
        world_size=run.world_size,
        missing_ranks=tuple(run.missing_ranks),
        step_range=run.steps,
        windows=windows,
        span=span,
        steps=_steps_table([p for part in parts for p in part.steps]),
        agg=agg,
        groups=info.table(),
        util_bins=util_bins,
        util=_util_table([u for part in parts for u in part.util], bin_ns) if util_bins else None,
        inter=setup.inter.table() if setup.inter is not None else None,
        quantiles=lat.table() if quantiles else None,
    )
    head_matched = None
    if match and setup.spill is not None:
        matched, head_matched = _match_spilled(parts, names, headline, setup.workers > 1)
        result = replace(result, matched=matched)
    elif match:
        matches, triple_names = _match_parts(parts, names)
        matched, head_matched = match_calls(matches, triple_names, headline)
        result = replace(result, matched=matched)
    if headline is None:
        return result
    if not agg_parts:
        return replace(result, head=replace(result, step_range=headline))
    whole, inner = split_aggregate(agg)
    head = _head(replace(result, agg=inner, matched=head_matched), headline)
    return replace(result, agg=whole, head=head)


_NAMED = ("op", "pg_name", "role", "phase", "module")
"""The string columns the pass codes."""


def _in_run_order(agg: pa.Table, names: dict[str, Codes]) -> pa.Table:
    """A rank's aggregate rows ordered by the run's codes of their keys (and then size
    bucket and ``inside``), the order :func:`rank_aggregate` gives them in one process:
    sums over them are then made in the same order whatever the number of workers."""
    keys = [
        np.array([names[k].index[v] for v in agg.column(k).to_pylist()], np.int64) for k in _NAMED
    ]
    keys.append(agg.column("size_bucket_bytes").to_numpy())
    if "inside" in agg.column_names:
        keys.append(agg.column("inside").to_numpy(zero_copy_only=False).astype(np.int64))
    order = np.lexsort(keys[::-1])
    return agg.take(pa.array(order))


def _pass_chunk(run: RunView, setup: _Setup, ranks: list[int]) -> _Chunk:
    """The pass over ``ranks`` (one process's share), codes of its own."""
    chunk = _Chunk(names={k: Codes() for k in _NAMED})
    problems = len(run.problems)
    if in_worker():
        detach(run)
    if setup.match and setup.spill is not None and ranks:
        chunk.spilled = CallSpill.open(setup.spill, ranks[0])
    if setup.quantiles and setup.spill is not None and ranks:
        chunk.lat = LatencyQuantiles(Spill(setup.spill, f"latency{ranks[0]}", VALUE))
    try:
        for rank in ranks:
            _pass_rank(run, setup, rank, chunk)
    except RankDamaged as exc:
        if not in_worker():
            raise
        chunk.damaged = (exc.rank, str(exc))
    finally:
        if chunk.spilled is not None:
            chunk.spilled.spill.close()
        if chunk.lat.spill is not None:
            chunk.lat.spill.close()
    chunk.problems = run.problems[problems:]
    return chunk


def _pass_rank(run: RunView, setup: _Setup, rank: int, chunk: _Chunk) -> None:
    """One rank's part of the pass, added to ``chunk``."""
    t, order = rank_rows(run, rank, _COLUMNS, run.steps)  # in seq order
    if not t.num_rows:
        return
    names = chunk.names
    ops, groups = names["op"], names["pg_name"]
    seq = t.column("seq").to_numpy()
    codes = {k: c.encode(t.column(k)) for k, c in names.items()}
    op, pg, role = codes["op"], codes["pg_name"], codes["role"]
    gsize = pc.fill_null(t.column("group_size"), 1).to_numpy()
    step = pc.fill_null(t.column("step"), 0).to_numpy()
    size = pc.fill_null(t.column("size_bytes"), 0).to_numpy()
    s = t.column("t_issue_ns").to_numpy()
    e = t.column("t_end_ns").to_numpy()
    wait = pc.fill_null(t.column("t_wait_ns"), 0).to_numpy()
    run.check_times(rank, step, s, e)  # a warning for an op that ends before its issue:
    e = np.maximum(e, s)  # it takes no time (every interval, share and split >= 0)
    duration = np.maximum(pc.fill_null(t.column("duration_s"), 0.0).to_numpy(), 0.0)
    start, service = queue_service(pg, s, e, setup.workers)
    learn_groups(chunk.groups, groups, pg, gsize, pg_ranks_reader(run, rank, order))
    inside = in_steps(step, setup.headline) if setup.headline is not None else None
    chunk.agg.append(rank_aggregate(rank, names, codes, size, duration, wait, service, inside))
    chunk.steps.append(step_rows(rank, step, s, e, wait, size, setup.by_rank.get(rank)))
    if setup.util_bins:
        factor = _factors(op, gsize, ops.values)
        wire = spread(s, e, size * factor, setup.t0, setup.bin_ns, setup.n_bins)
        chunk.util.append((rank, wire))
    if setup.inter is not None:
        members = {c: chunk.groups.ranks.get(groups.values[c], []) for c in np.unique(pg).tolist()}
        peer = pc.fill_null(t.column("peer"), -1).to_numpy()
        calls = (op, pg, gsize, peer)
        chunk.inter.append(
            (rank, setup.inter.rank_bins(rank, ops.values, members, calls, (s, e, size)))
        )
    if setup.quantiles:
        chunk.lat.add(names, op, pg, role, size_bucket(size), t.column("duration_s"), rank)
    if setup.match:
        p2p = np.isin(op, [ops.index[o] for o in P2P_OPS if o in ops.index])
        bad = np.isin(pg, [groups.index[g] for g in setup.excluded if g in groups.index])
        keep = ~p2p & ~bad & (gsize > 1)
        matchable = {
            "op": op[keep],
            "pg": pg[keep],
            "role": role[keep],
            "seq": compact(seq[keep]),
            "step": step[keep].astype(np.int32),
            "size": gsize[keep].astype(np.int32),
            "t_issue": s[keep],
            "queued": compact(start[keep] - s[keep]),
            "latency": compact(e[keep] - s[keep]),
            "nbytes": compact(size[keep]),
            **({"service": compact(service[keep])} if setup.workers > 1 else {}),
        }
        if chunk.spilled is not None:
            spill_calls(chunk.spilled, rank, matchable, setup.width)
        else:
            chunk.calls.append((rank, matchable))


def _match_parts(
    parts: list[_Chunk], names: dict[str, Codes]
) -> tuple[tuple[MatchPart, ...], tuple[Triple, ...]]:
    """The chunks' collective calls in the run's codes, as :class:`MatchPart` s, and the
    (op, group, role) of each triple code."""
    triples = Codes()
    matches: list[MatchPart] = []
    for part in parts:
        to_run = _to_run(part, names)
        while part.calls:
            rank, c = part.calls.pop(0)  # freed as they are converted
            op = to_run["op"][c["op"]].astype(np.int32)
            pg = to_run["pg_name"][c["pg"]].astype(np.int32)
            role = to_run["role"][c["role"]].astype(np.int32)
            pairs, pair = dense_codes(pg.astype(np.int64))  # global group codes
            matches.append(
                MatchPart(
                    rank=rank,
                    pairs=pairs,
                    pair=pair.astype(np.int32),
                    k=kth(pair, pairs.size),
                    op=op,
                    triple=_triple_codes(triples, op, pg, role),
                    seq=c["seq"],
                    step=c["step"],
                    size=c["size"],
                    t_issue=c["t_issue"],
                    queued=c["queued"],
                    latency=c["latency"],
                    nbytes=c["nbytes"],
                    service=c.get("service"),
                )
            )
    return tuple(matches), _triple_names(triples, names)[0]


def _to_run(part: _Chunk, names: dict[str, Codes]) -> dict[str, np.ndarray]:
    """``part``'s codes of ops, groups and roles as the run's: ``to_run[k][code]``."""
    return {
        k: np.array([names[k].index[v] for v in part.names[k].values] or [0], np.int64)
        for k in ("op", "pg_name", "role")
    }


def _triple_names(triples: Codes, names: dict[str, Codes]) -> tuple[tuple[Triple, ...], np.ndarray]:
    """(op, group, role) of each triple code (:func:`_triple_codes`), and its combo
    ``(group·TRIPLE + op)·TRIPLE + role`` in the run's codes."""
    ops, groups, roles = (names[k].values for k in ("op", "pg_name", "role"))
    out, combos = [], []
    for v in triples.values:
        a, b, c = (int(x) for x in v.split("\x00"))
        out.append((ops[a], groups[b], roles[c]))
        combos.append((b * TRIPLE + a) * TRIPLE + c)
    return tuple(out), np.array(combos, np.int64)


def _match_spilled(
    parts: list[_Chunk], names: dict[str, Codes], headline: StepRange | None, service: bool
) -> tuple[Matched, Matched | None]:
    """:func:`_match_parts` and :func:`match_calls` of calls written to disk: the triples
    coded as there (each rank's, in rank order), the matching a chunk of steps at a time
    (:func:`commlens.analysis.matchchunks.match_spilled`)."""
    triples = Codes()
    spilled = []
    for part in parts:
        if part.spilled is None:
            continue
        to_run = _to_run(part, names)
        for rank in sorted(part.spilled.triples):
            combo = part.spilled.triples.pop(rank)
            pg, op, role = combo // TRIPLE // TRIPLE, combo // TRIPLE % TRIPLE, combo % TRIPLE
            _triple_codes(triples, to_run["op"][op], to_run["pg_name"][pg], to_run["role"][role])
        spilled.append(Coded(part.spilled, to_run))
    triple_names, combos = _triple_names(triples, names)
    return match_spilled(spilled, triple_names, combos, headline, service)


def _head(rp: RankPass, steps: StepRange) -> RankPass:
    """``rp`` (its aggregates and matching already those of ``steps``) restricted to
    ``steps``."""

    def rows(t: pa.Table) -> pa.Table:
        step = pc.fill_null(t.column("step"), 0).to_numpy(zero_copy_only=False)
        return t.filter(pa.array(in_steps(step, steps)))

    return replace(
        rp,
        step_range=steps,
        windows=rows(rp.windows),
        steps=rows(rp.steps),
        util_bins=None,
        util=None,
        inter=None,
        quantiles=None,
    )


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
            "service_s": pa.array([], pa.float64()),
        }
    )


def _triple_codes(codes: Codes, op: np.ndarray, pg: np.ndarray, role: np.ndarray) -> np.ndarray:
    """Global codes of (op, group, role) of each call, new ones numbered in the order of
    (group, op, role)."""
    if not op.size:
        return np.empty(0, np.int32)
    combos, inverse = dense_codes((pg.astype(np.int64) * 4096 + op) * 4096 + role)
    lookup = np.array(
        [
            codes.code(f"{c // 4096 % 4096}\x00{c // (4096 * 4096)}\x00{c % 4096}")
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
