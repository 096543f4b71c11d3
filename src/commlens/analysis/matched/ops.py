"""A run read once: every rank's ops in issue order, on one aligned clock, as arrays.

Each rank's events are read by :func:`rank_rows` (only the columns asked,
strings dictionary-encoded, rows in sequence order, times moved onto rank 0's
clock by :mod:`commlens.trace.align`): the rank pass of ``report`` and the
whole-run arrays of ``whatif`` (:func:`read_ops`) read through it.

An op carries three times: ``t_issue`` (when its caller issued it, on the
host), ``t_end`` (when it completed) and, where the trace recorded one,
``t_start`` (when it began on its stream: an imported GPU trace's kernel
start); without it the start is found by the queue rule
(:mod:`commlens.analysis.matched.queues`). Any of them may lie on another
clock than the caller's as long as the run's clock puts them on rank 0's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.analysis.codes import Codes
from commlens.analysis.spill import Index, Spill, chunk_of, read_chunk
from commlens.trace.packed import COMPACT_FIELDS
from commlens.trace.reader import RankDamaged, RunView, StepRange, in_steps, open_run
from commlens.trace.schema import EVENT_SCHEMA

OP_COLUMNS = ("op", "pg_name", "role", *COMPACT_FIELDS[COMPACT_FIELDS.index("size_bytes") :])
"""The event columns a :class:`RunOps` holds (their types: the run format's): the op, its
group and role, and the packed record's message size, peer, async flag, times and step."""
STRINGS = tuple(c for c in OP_COLUMNS if pa.types.is_string(EVENT_SCHEMA.field(c).type))
NARROWED = ("rank", "op", "pg_name", "role", "size_bytes", "peer", "t_wait_ns", "step")
"""Columns kept in the narrowest of int16, int32 and int64 that holds every value (all
but the clock times, which need 64 bits): 35 to 57 bytes an event."""

FIELDS = {
    "op": "op",
    "pg_name": "group",
    "role": "role",
    "size_bytes": "size_bytes",
    "peer": "peer",
    "is_async": "is_async",
    "t_issue_ns": "t_issue",
    "t_end_ns": "t_end",
    "t_wait_ns": "t_wait",
    "step": "step",
}
"""The :class:`RunOps` field each event column is held in."""


def _dtype(column: str) -> type[np.generic]:
    """The numpy type of a column of :class:`RunOps` (strings: int32 codes)."""
    if column == "rank" or column in STRINGS:
        return np.int32
    typ = EVENT_SCHEMA.field(column).type
    return np.bool_ if pa.types.is_boolean(typ) else np.dtype(typ.to_pandas_dtype()).type


@dataclass
class RunOps:
    """A run's ops (sorted by rank, then issue order) and step windows, as arrays.

    Strings are dictionary codes: ``op[i]`` indexes ``op_names``, ``group[i]``
    indexes ``groups`` (the members of each process group) and ``group_names``.
    Times are nanoseconds on rank 0's clock. Event arrays are int32 codes,
    int64 times and sizes, or narrower (:data:`NARROWED`: widen before arithmetic
    that could overflow them); step windows are int64.
    """

    name: str
    world_size: int
    rank: np.ndarray
    op: np.ndarray
    op_names: list[str]
    group: np.ndarray
    group_names: list[str]
    groups: list[tuple[int, ...]]
    role: np.ndarray
    role_names: list[str]
    size_bytes: np.ndarray
    peer: np.ndarray
    """Global peer rank of a send/recv (a rooted op's root), -1 otherwise."""
    is_async: np.ndarray
    t_issue: np.ndarray
    t_end: np.ndarray
    t_wait: np.ndarray
    step: np.ndarray
    """The event's step, -1 when it has none."""
    step_rank: np.ndarray
    step_index: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    manifest: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """The reader's findings of times that cannot be (see ``RunView.check_times``)."""
    t_start: np.ndarray | None = None
    """When each op began on its stream, where the trace recorded it (an imported
    device trace); None: found by the queue rule."""

    @property
    def events(self) -> int:
        return int(self.rank.size)


def rank_rows(
    view: RunView, rank: int, columns: list[str], steps: StepRange | None = None
) -> tuple[pa.Table, np.ndarray | None]:
    """One rank's events (``columns`` and ``seq``) in ``steps``, in sequence order, and
    the file row of each (None: the file's rows, as they are); :class:`RankDamaged`
    when its file turns out damaged (the view drops it)."""
    t = view.read_rank(rank, ["seq", *[c for c in columns if c != "seq"]])
    seq = t.column("seq").to_numpy()
    order = None
    if seq.size > 1 and np.any(seq[1:] < seq[:-1]):
        order = np.argsort(seq, kind="stable")
    if steps is not None and t.num_rows:
        keep = in_steps(_filled(t.column("step"), 0).to_numpy(), steps)
        if not keep.all():
            order = np.flatnonzero(keep) if order is None else order[keep[order]]
    return (t if order is None else t.take(pa.array(order))), order


def pg_ranks_reader(
    view: RunView, rank: int, order: np.ndarray | None
) -> Callable[[list[int]], list[Any]]:
    """Reads ``pg_ranks`` at rows of :func:`rank_rows`'s table (mapped to file rows)."""

    def read(rows: list[int]) -> list[Any]:
        file_rows = [int(order[r]) for r in rows] if order is not None else rows
        return view.read_values(rank, "pg_ranks", file_rows)

    return read


def _column(table: pa.Table, name: str, names: dict[str, Codes]) -> np.ndarray:
    """Column ``name`` of one rank's events as an array of its :class:`RunOps` type."""
    if name in STRINGS:
        return names[name].encode(table.column(name))
    if name == "is_async":
        return _filled(table.column(name), False).to_numpy(zero_copy_only=False)
    values = _filled(table.column(name), -1).to_numpy()
    return values.astype(_dtype(name), copy=False)


def _narrowest(parts: list[np.ndarray], widest: type[np.generic]) -> type[np.generic]:
    """The narrowest of int16, int32 and ``widest`` that holds every value of ``parts``."""
    filled = [p for p in parts if p.size]
    if not filled:
        return widest
    lo, hi = min(int(p.min()) for p in filled), max(int(p.max()) for p in filled)
    for dtype in (np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max and info.bits < 8 * np.dtype(widest).itemsize:
            return dtype
    return widest


def narrowed(values: np.ndarray, name: str) -> np.ndarray:
    """One rank's ``values`` of column ``name`` in the narrowest type that holds them
    (:func:`_joined` then takes the widest of the ranks')."""
    return values.astype(_narrowest([values], _dtype(name)), copy=False)


def _joined(parts: list[np.ndarray], name: str) -> np.ndarray:
    """The ranks' arrays of column ``name`` as one (narrowed: :data:`NARROWED`), each
    rank's freed once it is copied."""
    widest = _dtype(name)
    dtype = _narrowest(parts, widest) if name in NARROWED else widest
    out = np.concatenate(parts, dtype=dtype) if parts else np.zeros(0, dtype=dtype)
    parts.clear()
    return out


def _ints(table: pa.Table, name: str, null: int) -> np.ndarray:
    return _filled(table.column(name), null).to_numpy().astype(np.int64, copy=False)


def _filled(column: pa.ChunkedArray, null: object) -> pa.ChunkedArray:
    """``column`` with its nulls replaced by ``null`` (itself when it has none: no copy)."""
    return pc.fill_null(column, null) if column.null_count else column


MATCH_COLUMNS = ("op", "pg_name", "peer", "t_issue_ns", "t_end_ns")
"""What matching the ops and checking the clocks reads (:func:`read_ops`' ``columns``)."""


def read_ops(source: str | Path | RunView, columns: tuple[str, ...] = OP_COLUMNS) -> RunOps:
    """Every rank's ops of the run in ``source`` (a directory, or a view of one: its
    steps), a rank whose file is damaged left out (in :attr:`RunOps.missing_ranks`);
    of ``columns`` only (the others left empty: e.g. :data:`MATCH_COLUMNS`)."""
    if isinstance(source, RunView):
        return _read_ops(source, source.name, columns)
    with open_run(source) as view:
        return _read_ops(view, Path(source).name or str(source), columns)


def _read_ops(view: RunView, name: str, columns: tuple[str, ...]) -> RunOps:
    names = {c: Codes() for c in STRINGS}
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ("rank", *OP_COLUMNS)}
    members: dict[int, tuple[int, ...]] = {}

    def keep(rank: int, rows: dict[str, np.ndarray]) -> None:
        for c, values in rows.items():  # narrowed as read: the run's columns never all wide
            cols[c].append(narrowed(values, c) if c in NARROWED else values)

    _each_rank(view, columns, names, members, keep, check="step" in columns)
    return _run_ops(view, name, names, members, cols)


def _each_rank(
    view: RunView,
    columns: tuple[str, ...],
    names: dict[str, Codes],
    members: dict[int, tuple[int, ...]],
    use: Callable[[int, dict[str, np.ndarray]], None],
    *,
    check: bool,
) -> None:
    """Each rank's ``columns`` (and ``rank``) as arrays of their :class:`RunOps` types,
    strings coded in ``names``, given to ``use`` rank by rank (a rank whose file is damaged
    left out); ``members`` learns each group's ranks; ``check``: the times are checked
    (:meth:`RunView.check_times`)."""
    for rank in view.ranks:
        try:
            table, order = rank_rows(view, rank, list(columns))
        except RankDamaged:
            continue
        if check:
            view.check_times(
                rank, _ints(table, "step", -1), _ints(table, "t_issue_ns", 0),
                _ints(table, "t_end_ns", 0),
            )  # fmt: skip
        rows = {"rank": np.full(table.num_rows, rank, dtype=np.int32)}
        for c in columns:  # may be a view of the table's buffers: own a copy
            rows[c] = np.require(_column(table, c, names), requirements=["W", "O"])
        del table
        group = rows["pg_name"]
        new = [g for g in np.unique(group).tolist() if g not in members]
        if new:
            first = [int(np.argmax(group == g)) for g in new]
            read = pg_ranks_reader(view, rank, order)
            for g, ranks in zip(new, read(first), strict=True):
                members[g] = tuple(int(r) for r in (ranks or ()))
        use(rank, rows)


def _run_ops(
    view: RunView,
    name: str,
    names: dict[str, Codes],
    members: dict[int, tuple[int, ...]],
    cols: dict[str, list[np.ndarray]],
) -> RunOps:
    """The :class:`RunOps` of ``view`` of the ranks' arrays ``cols`` (emptied)."""
    steps = view.step_table()
    facts = (view.world_size, list(view.missing_ranks), list(view.problems))
    manifest, warnings = view.manifest, list(view.warnings)
    pa.default_memory_pool().release_unused()  # the ranks' tables: back to the system
    ev = {c: _joined(cols.get(c, []), c) for c in ("rank", *OP_COLUMNS)}
    groups = names["pg_name"].values
    events: dict[str, Any] = {FIELDS[c]: ev[c] for c in OP_COLUMNS}
    return RunOps(
        name=name,
        world_size=facts[0],
        rank=ev["rank"],
        **events,
        op_names=names["op"].values,
        group_names=groups,
        groups=[members.get(g, ()) for g in range(len(groups))],
        role_names=names["role"].values,
        step_rank=_ints(steps, "rank", 0),
        step_index=_ints(steps, "step", 0),
        step_start=_ints(steps, "t_start_ns", 0),
        step_end=_ints(steps, "t_end_ns", 0),
        manifest=manifest,
        warnings=warnings,
        missing_ranks=facts[1],
        problems=facts[2],
    )


def spilled_dtype(columns: tuple[str, ...]) -> np.dtype:
    """The record of a spilled op (:func:`spill_ops`) of ``columns``: its rank and each
    column, under its :class:`RunOps` field's name and in its type (not narrowed)."""
    return np.dtype([("rank", "i4"), *((FIELDS[c], _dtype(c)) for c in columns)])


SPILLED = spilled_dtype(MATCH_COLUMNS)
"""A spilled op of :data:`MATCH_COLUMNS`: what matching and the clock check read of it."""


def run_size(view: RunView) -> tuple[int, int]:
    """(events, steps) of ``view``'s run, from its files' metadata and step windows."""
    steps = np.unique(view.step_table().column("step").to_numpy()).size
    return sum(view.rows.values()), int(steps)


def spill_ops(
    view: RunView, folder: Path, width: int, columns: tuple[str, ...] = MATCH_COLUMNS
) -> tuple[RunOps, Index]:
    """Every rank's ops of ``view`` (``columns``: :func:`spilled_dtype`) written to
    ``folder`` by chunk of ``width`` steps (:mod:`commlens.analysis.spill`): (the run's ops
    without events: its names, groups, step windows and facts; where each rank's ops of
    each chunk are). Where ``columns`` hold the ``step`` (all of :data:`OP_COLUMNS`: a
    replay's), the times are checked as :func:`read_ops` checks them."""
    names = {c: Codes() for c in STRINGS}
    members: dict[int, tuple[int, ...]] = {}
    dtype = spilled_dtype(columns)
    spill = Spill(folder, "ops", dtype)

    def write(rank: int, rows: dict[str, np.ndarray]) -> None:
        rec = np.empty(rows["rank"].size, dtype)
        rec["rank"] = rows["rank"]
        for c in columns:
            rec[FIELDS[c]] = rows[c]
        spill.add(rank, chunk_of(rows["step"], width), rec)

    read = columns if "step" in columns else (*columns, "step")
    try:
        _each_rank(view, read, names, members, write, check="step" in columns)
    finally:
        spill.close()
    return _run_ops(view, view.name, names, members, {}), spill.index


def spilled_ops(
    template: RunOps, index: Index, chunk: int, columns: tuple[str, ...] = MATCH_COLUMNS
) -> RunOps:
    """The ops of ``chunk`` of every rank (:func:`spill_ops` of ``columns``), in a copy of
    ``template``."""
    rec = read_chunk(index, chunk, spilled_dtype(columns))
    fields: dict[str, Any] = {FIELDS[c]: rec[FIELDS[c]] for c in columns}
    return replace(template, rank=rec["rank"], **fields)
