"""The one place ``whatif`` reads a run: its events and step windows as numpy arrays.

Reading goes through the public reader (:func:`commlens.trace.reader.open_run`,
one rank's columns at a time);
every other module of the package works on :class:`Trace`, so a change of
reader touches only this file. A run the replay cannot honestly re-time is
refused with one line: a rank missing or damaged (its peers' collectives
would have no partner), no events, no step markers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.errors import RunFormatError
from commlens.trace.files import format_ranks
from commlens.trace.manifest import SYNTHETIC_TIMES, time_semantics

COLUMNS = [
    "seq",
    "op",
    "pg_name",
    "role",
    "size_bytes",
    "peer",
    "is_async",
    "t_issue_ns",
    "t_end_ns",
    "t_wait_ns",
    "step",
]
STRINGS = ("op", "pg_name", "role")
DTYPES: dict[str, type[np.generic]] = {
    "rank": np.int32,
    "op": np.int32,
    "pg_name": np.int32,
    "role": np.int32,
    "size_bytes": np.int64,
    "peer": np.int32,
    "is_async": np.bool_,
    "t_issue_ns": np.int64,
    "t_end_ns": np.int64,
    "t_wait_ns": np.int64,
    "step": np.int32,
}
"""The widest array type of each column kept (codes, ranks and steps in 32 bits, times
and sizes in 64)."""
NARROWED = ("rank", "op", "pg_name", "role", "size_bytes", "peer", "t_wait_ns", "step")
"""Columns kept in the narrowest of int16, int32 and int64 that holds every value (all
but the clock times, which need 64 bits): 35 to 57 bytes an event."""


@dataclass
class Trace:
    """A run's events (sorted by rank, then issue order) and step windows, as arrays.

    Strings are dictionary codes: ``op[i]`` indexes ``op_names``, ``group[i]``
    indexes ``groups`` (the members of each process group) and ``group_names``.
    Times are nanoseconds on rank 0's clock. Event arrays have the types of
    :data:`DTYPES`, or narrower ones (:data:`NARROWED`: widen before arithmetic
    that could overflow them); step windows are int64. The columns of
    :data:`commlens.whatif.model.BUILD_ONLY` are emptied once a program is built
    from the trace.
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
    """Global peer rank of a send/recv, -1 otherwise."""
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

    @property
    def events(self) -> int:
        return int(self.rank.size)


class _Names:
    """One code per distinct string of a column, over all ranks."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def codes(self, column: pa.ChunkedArray) -> np.ndarray:
        """Global codes (int32) of a dictionary-encoded column (nulls are '')."""
        out = []
        for chunk in column.chunks:
            values = [*chunk.dictionary.to_pylist(), ""]  # the last one stands for null
            local = np.array([self._code(v) for v in values], dtype=np.int32)
            idx = pc.fill_null(chunk.indices, len(chunk.dictionary)).to_numpy()
            out.append(local[idx])
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int32)

    def _code(self, value: str | None) -> int:
        key = value or ""
        code = self._index.get(key)
        if code is None:
            code = self._index[key] = len(self.values)
            self.values.append(key)
        return code


def _ints(table: pa.Table, name: str, null: int, dtype: type[np.generic] = np.int64) -> np.ndarray:
    return pc.fill_null(table.column(name), null).to_numpy().astype(dtype, copy=False)


def _column(table: pa.Table, name: str, names: dict[str, _Names]) -> np.ndarray:
    """Column ``name`` of one rank's events as a numpy array of its :data:`DTYPES` type."""
    if name in STRINGS:
        return names[name].codes(table.column(name))
    if name == "is_async":
        return pc.fill_null(table.column(name), False).to_numpy(zero_copy_only=False)
    return _ints(table, name, -1, DTYPES[name])


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


def _joined(parts: list[np.ndarray], name: str) -> np.ndarray:
    """The ranks' arrays of column ``name`` as one (narrowed: :data:`NARROWED`), each
    rank's freed once it is copied."""
    dtype = _narrowest(parts, DTYPES[name]) if name in NARROWED else DTYPES[name]
    out = np.concatenate(parts, dtype=dtype) if parts else np.zeros(0, dtype=dtype)
    parts.clear()
    return out


def _names(line: str, rank: int) -> bool:
    """Whether a reader's warning ``line`` is about rank ``rank`` (it skipped the rank, or
    the rank has no file)."""
    return line.endswith(f"rank {rank} skipped") or line.startswith(f"rank {rank}: ")


def read_trace(path: str | Path) -> Trace:
    """The run in ``path`` for replay; :class:`RunFormatError` when it cannot be replayed."""
    from commlens.trace.reader import RankDamaged, open_run

    where = str(path)
    with open_run(path) as view:
        names = {c: _Names() for c in STRINGS}
        cols: dict[str, list[np.ndarray]] = {c: [] for c in DTYPES}
        members: dict[int, tuple[int, ...]] = {}
        for rank in view.ranks:
            try:
                table = view.read_rank(rank, COLUMNS)
            except RankDamaged as exc:
                message = f"{where}: {exc}; a replay needs every rank's events"
                raise RunFormatError(message) from None
            view.check_times(
                rank,
                _ints(table, "step", -1),
                _ints(table, "t_issue_ns", 0),
                _ints(table, "t_end_ns", 0),
            )
            seq = table.column("seq").to_numpy()
            ordered = bool(np.all(seq[1:] >= seq[:-1]))
            order = None if ordered else np.argsort(seq, kind="stable")
            for c in COLUMNS[1:]:  # all but seq
                values = _column(table, c, names)  # may be a view of the table's buffers
                own = np.require(values, requirements=["W", "O"]) if order is None else None
                cols[c].append(values[order] if own is None else own)
            del table
            cols["rank"].append(np.full(seq.size, rank, dtype=DTYPES["rank"]))
            group = cols["pg_name"][-1]
            new = [g for g in np.unique(group).tolist() if g not in members]
            if new:
                first = [int(np.argmax(group == g)) for g in new]
                rows = first if order is None else [int(order[i]) for i in first]
                for g, ranks in zip(new, view.read_values(rank, "pg_ranks", rows), strict=True):
                    members[g] = tuple(int(r) for r in (ranks or ()))
        missing, world = list(view.missing_ranks), view.world_size
        problems = list(view.problems)
        steps = view.sql("SELECT rank, step, t_start_ns, t_end_ns FROM steps ORDER BY rank, step")
        manifest, warnings = view.manifest, list(view.warnings)
    pa.default_memory_pool().release_unused()  # the ranks' tables: back to the system
    if time_semantics(manifest) == SYNTHETIC_TIMES:
        raise RunFormatError(
            f"{where}: its times are synthetic (an aggregate-only import: only op counts and "
            "bytes are data); a replay needs measured times"
        )
    if missing:
        why = [line for line in warnings if any(_names(line, r) for r in missing)]
        raise RunFormatError(
            f"{where}: rank(s) {format_ranks(missing)} missing or unreadable"
            + (f" ({'; '.join(why[:3])})" if why else "")
            + "; a replay needs every rank's events (their peers' collectives have no partner)"
        )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunFormatError(
            f"{where}: {problems[0]}{more}; a replay of times that cannot be is no answer"
        )
    ev = {c: _joined(v, c) for c, v in cols.items()}
    if not ev["rank"].size:
        raise RunFormatError(f"{where}: the run holds no communication events to replay")
    if not steps.num_rows:
        raise RunFormatError(
            f"{where}: the run has no step markers (optimizer steps or commlens.step()); "
            "whatif reports per-step times and needs them"
        )
    groups = names["pg_name"].values
    return Trace(
        name=Path(path).name or where,
        world_size=world,
        rank=ev["rank"],
        op=ev["op"],
        op_names=names["op"].values,
        group=ev["pg_name"],
        group_names=groups,
        groups=[members.get(g, ()) for g in range(len(groups))],
        role=ev["role"],
        role_names=names["role"].values,
        size_bytes=ev["size_bytes"],
        peer=ev["peer"],
        is_async=ev["is_async"],
        t_issue=ev["t_issue_ns"],
        t_end=ev["t_end_ns"],
        t_wait=ev["t_wait_ns"],
        step=ev["step"],
        step_rank=_ints(steps, "rank", 0),
        step_index=_ints(steps, "step", 0),
        step_start=_ints(steps, "t_start_ns", 0),
        step_end=_ints(steps, "t_end_ns", 0),
        manifest=manifest,
        warnings=warnings,
    )
