"""Read a run directory: the one reader, lazy over DuckDB.

Public API (what analyses, reports and other packages read runs through):

- :func:`open_run` (path, or a loaded :class:`Run`) -> :class:`RunView`: the
  manifest checked, every rank file's footer, schema and statistics checked
  (:mod:`commlens.trace.files`), and DuckDB views over the files, read only
  when queried:

  - ``events``: every event, ``t_issue_ns``/``t_end_ns`` on rank 0's clock,
    ``role`` the one role of its group for the whole run
    (:mod:`commlens.trace.roles`);
  - ``steps``: ``rank, step, t_start_ns, t_end_ns, duration_s`` from the
    manifest, on rank 0's clock too (``duration_s`` as the rank measured it);
  - ``ranks``: ``rank, status, host, events`` of every rank known to the run.

  :meth:`RunView.sql` / :meth:`RunView.row` query them;
  :meth:`RunView.read_rank` reads one rank's columns straight from its file
  with pyarrow (for numpy passes), aligned and with roles the same way. A step range given
  to :func:`open_run` applies to all of these. Close the view when done (it
  is a context manager).
- :func:`load_run` -> :class:`Run` (or :meth:`RunView.load`): every event read
  into one Arrow table through the same view (small runs, tests, replay):
  ``Run.events`` sorted by (rank, seq), ``Run.steps_table()`` and
  ``Run.ranks_table()`` (the ``steps`` and ``ranks`` views' tables),
  ``Run.missing_ranks``, ``Run.warnings``, ``Run.world_size``, ``Run.duckdb()``.
- :func:`step_windows` (the ``steps`` table of a checked manifest) and
  :func:`step_filter` (a step range as SQL), for code that builds its own views.

A missing, truncated or damaged rank file is a warning and the rank is left
out (listed in ``missing_ranks``); damage inside a file's pages shows only
when they are read, and the view then leaves the rank out the same way
(:meth:`RunView.drop_rank`). Foreign files or a bad manifest are a one-line
:class:`commlens.errors.RunFormatError` naming the file. File names come from
:mod:`commlens.trace.layout`, the clock formula from :mod:`commlens.trace.align`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commlens.errors import RunFormatError
from commlens.trace.align import (
    NO_CLOCK,
    align_numpy,
    align_sql,
    clock_table,
    clocks,
    moved,
    moves,
)
from commlens.trace.files import one_line, open_files, ranks_table
from commlens.trace.manifest import Clock, Manifest, read_manifest
from commlens.trace.roles import apply_roles, group_roles, role_sql
from commlens.trace.sanity import event_problems, recording, window_problems
from commlens.trace.schema import DEVICE_COLUMN_NAMES, DEVICE_COLUMNS, EVENT_SCHEMA, TAIL_SEGMENT

if TYPE_CHECKING:
    import duckdb

StepRange = tuple[int | None, int | None]
"""(first, stop): only steps first <= step < stop; either end may be None (open)."""
STEPS_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int32()),
        ("t_start_ns", pa.int64()),
        ("t_end_ns", pa.int64()),
        ("duration_s", pa.float64()),
    ]
)
"""The ``steps`` view: each rank's recorded step windows."""
TIME_COLUMNS = ("t_issue_ns", "t_end_ns")
"""The columns that hold times on the rank's clock (moved onto rank 0's)."""
_T = TypeVar("_T")


class RankDamaged(RunFormatError):
    """A rank's file failed while being read; the view has left the rank out."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


@dataclass
class Run:
    """A loaded run (:func:`load_run`): its manifest, all its events, what could not be read."""

    path: Path
    manifest: dict[str, Any]
    events: pa.Table
    warnings: list[str] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    info: Manifest | None = None
    """The checked manifest (``manifest`` is its data); read from ``path`` when None."""

    @property
    def checked(self) -> Manifest:
        if self.info is None:
            self.info = read_manifest(self.path)
        return self.info

    @property
    def world_size(self) -> int:
        size = self.checked.world_size
        if size is not None:
            return size
        ranks = self.ranks
        return (max(ranks) + 1) if ranks else 0

    @property
    def ranks(self) -> list[int]:
        """Ranks whose events were read."""
        if not self.events.num_rows:
            return []
        return sorted(int(r) for r in pc.unique(self.events.column("rank")).to_pylist())

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with tables ``events``, ``steps`` and ``ranks``."""
        import duckdb

        con = duckdb.connect()
        con.register("events", self.events)
        con.register("steps", self.steps_table())
        con.register("ranks", self.ranks_table())
        return con

    def relation(self) -> Any:
        """The events as a DuckDB relation."""
        return self.duckdb().table("events")

    def steps_table(self) -> pa.Table:
        """Step windows of every rank, on rank 0's clock like the events."""
        return step_windows(self.checked)

    def ranks_table(self) -> pa.Table:
        return ranks_table(self.checked, set(self.ranks), self.missing_ranks)


def step_windows(manifest: Manifest, shifts: dict[int, int] | None = None) -> pa.Table:
    """``rank, step, t_start_ns, t_end_ns, duration_s`` of every rank's recorded steps,
    the times on rank 0's clock (moved ``shifts[rank]`` ns further where given: see
    :meth:`RunView.move_clocks`), the duration as the rank's own clock measured it; a
    window that ends before it starts is left out, and so is the tail after the last
    optimizer step, which is no step (its events are "after last step" to the analysis)."""
    rank: list[int] = []
    step: list[int] = []
    start: list[int] = []
    end: list[int] = []
    for r, info in manifest.ranks.items():
        for window in info.steps:
            if window.t_end_ns < window.t_start_ns:  # a warning says so (trace.sanity)
                continue
            if window.segment == TAIL_SEGMENT:
                continue
            rank.append(r)
            step.append(window.step)
            start.append(window.t_start_ns)
            end.append(window.t_end_ns)
    ranks = np.array(rank, np.int32)
    t_start = np.array(start, np.int64)
    t_end = np.array(end, np.int64)
    duration = (t_end - t_start) / 1e9
    for r, clock in clocks(manifest).items():
        mask = ranks == r
        if mask.any():
            t_start[mask] = align_numpy(t_start[mask], clock)
            t_end[mask] = align_numpy(t_end[mask], clock)
    for r, ns in (shifts or {}).items():
        mask = ranks == r
        t_start[mask] += ns
        t_end[mask] += ns
    return pa.table([ranks, np.array(step, np.int32), t_start, t_end, duration], STEPS_SCHEMA)


def read_parquet(
    path: Path, columns: list[str] | None = None, dictionary: list[str] | None = None
) -> pa.Table:
    """``columns`` (None: all) of the Parquet file ``path`` (``dictionary``: those read
    dictionary-encoded), read as one file, not through pyarrow's dataset layer (its
    module's import and a dataset made for each file), and closed once read."""
    with pq.ParquetFile(path, read_dictionary=dictionary) as file:
        return file.read(columns=columns)


def in_steps(step: np.ndarray, steps: StepRange) -> np.ndarray:
    """Which of ``step`` lie in steps ``[first, stop)`` (None: unbounded): :func:`step_filter`
    for arrays."""
    keep = np.ones(step.size, bool)
    if steps[0] is not None:
        keep &= step >= steps[0]
    if steps[1] is not None:
        keep &= step < steps[1]
    return keep


def step_filter(steps: StepRange | None, column: str = "step") -> str:
    """SQL condition for ``steps`` = (first, stop): first <= step < stop; None is open."""
    if steps is None:
        return "TRUE"
    parts = []
    if steps[0] is not None:
        parts.append(f"{column} >= {int(steps[0])}")
    if steps[1] is not None:
        parts.append(f"{column} < {int(steps[1])}")
    return " AND ".join(parts) or "TRUE"


@dataclass
class RunView:
    """An opened run (:func:`open_run`): manifest, warnings and DuckDB views over its files.

    The DuckDB connection and its views are made on first use (:attr:`con`): a command
    that reads the ranks' files itself (``whatif``, the matched-run layer) never pays for
    them."""

    path: Path
    manifest: dict[str, Any]
    info: Manifest
    """The checked manifest (``manifest`` is its data)."""
    warnings: list[str] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    sources: dict[int, Path | pa.Table] = field(default_factory=dict)
    """Where each rank's raw events are: its Parquet file, or a table (parts, loaded run)."""
    clocks: dict[int, Clock] = field(default_factory=dict)
    """rank -> its clock (see :mod:`commlens.trace.align`); none for a loaded Run,
    whose events are aligned already."""
    steps: StepRange | None = None
    """Only steps first <= step < stop are seen (None: all); see :func:`open_run`."""
    quiet: bool = True
    """Warnings found after opening (:meth:`drop_rank`) are printed unless quiet."""
    with_events: set[int] = field(default_factory=set)
    rows: dict[int, int] = field(default_factory=dict)
    """rank -> events in its source (the file's metadata, or the table), read once."""
    scans: dict[int, str] = field(default_factory=dict)
    """rank -> the SQL that reads its raw events (the union is ``raw_events``)."""
    roles: dict[str, str] = field(default_factory=dict)
    """group name -> its one role for the run, read into every event of the group."""
    problems: list[str] = field(default_factory=list)
    """Times that cannot be (:mod:`commlens.trace.sanity`), each also a warning."""
    shifts: dict[int, int] | None = None
    """rank -> ns its clock was moved by after the causal check of the run's own order
    (:meth:`move_clocks`); None until the check was made."""
    threads: int = 0
    """DuckDB's threads (0: its default)."""
    loaded: pa.Table | None = None
    """A loaded Run's events (on rank 0's clock already), in place of ranks' files."""
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection with views ``events``, ``raw_events`` (a directory's),
        ``steps`` and ``ranks``, made on first use."""
        if self._con is None:
            import duckdb

            con = duckdb.connect()
            try:  # closed on any failure, Ctrl-C included: no database is left to finalize
                self._con = con
                _create_views(self)
            except BaseException:
                self._con = None
                con.close()
                raise
        return self._con

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def world_size(self) -> int:
        if self.info.world_size is not None:
            return self.info.world_size
        row = self.row("SELECT max(rank) + 1 FROM events")
        return int(row[0]) if row and row[0] is not None else 0

    @property
    def ranks(self) -> list[int]:
        """Ranks not missing (those with events, and those known to have none), in order."""
        return sorted((set(self.info.ranks) | self.with_events) - set(self.missing_ranks))

    def step_table(self) -> pa.Table:
        """The ``steps`` view's rows (``rank, step, t_start_ns, t_end_ns, duration_s`` of the
        steps seen), by rank and step, without DuckDB."""
        table = step_windows(self.info, self.shifts)
        if self.steps is not None:
            keep = in_steps(table.column("step").to_numpy(), self.steps)
            table = table.filter(pa.array(keep))
        return table.sort_by([("rank", "ascending"), ("step", "ascending")])

    def sql(self, query: str, params: list[Any] | None = None) -> pa.Table:
        """Run ``query`` and return the result as an Arrow table."""
        return self._retry(lambda: self.con.sql(query, params=params).to_arrow_table())

    def row(self, query: str) -> tuple[Any, ...] | None:
        """The first row of ``query`` (the result is consumed whole)."""
        rows = self._retry(lambda: self.con.execute(query).fetchall())
        return tuple(rows[0]) if rows else None

    def _retry(self, run: Callable[[], _T]) -> _T:
        """``run()``; when DuckDB fails on a rank's damaged file, that rank is left
        out and ``run`` tried again."""
        import duckdb

        while True:
            try:
                return run()
            except duckdb.Error as exc:
                rank = self._rank_named_in(str(exc))
                if rank is None:
                    rank = self._first_damaged()  # DuckDB's message names no file
                if rank is None:
                    raise
                self.drop_rank(rank, one_line(exc))

    def _rank_named_in(self, message: str) -> int | None:
        for rank, src in self.sources.items():
            if isinstance(src, Path) and src.name in message:
                return rank
        return None

    def _first_damaged(self) -> int | None:
        """The first rank whose events file cannot be read whole (every page decoded)."""
        for rank, src in sorted(self.sources.items()):
            if isinstance(src, Path):
                try:
                    read_parquet(src)
                except (OSError, pa.ArrowException, ValueError):
                    return rank
        return None

    def check_pages(self, ranks: list[int] | None = None) -> None:
        """Decode every page of every rank file (of ``ranks`` only, when given) once,
        before a stream that cannot be restarted: a rank whose pages are damaged is left
        out (a warning), as any query does."""
        wanted = self.sources if ranks is None else set(ranks)

        def decode() -> None:
            scans = [scan for rank, scan in self.scans.items() if rank in wanted]
            if any(isinstance(self.sources.get(r), Path) for r in wanted) and scans:
                cols = ", ".join(EVENT_SCHEMA.names)
                union = " UNION ALL ".join(f"SELECT {cols} FROM ({scan})" for scan in scans)
                self.con.execute(f"SELECT min(COLUMNS(*)) FROM ({union})").fetchall()

        self._retry(decode)

    def drop_rank(self, rank: int, reason: str) -> str:
        """Leave out ``rank``, whose file turned out damaged: it joins the missing
        ranks and its events leave the views."""
        src = self.sources.pop(rank, None)
        what = src.name if isinstance(src, Path) else f"rank {rank}'s flushed parts"
        line = f"{what} is damaged ({reason}): rank {rank} skipped"
        if src is None:
            return line
        self.warnings.append(line)
        if not self.quiet:
            print(f"commlens: warning: {line}", file=sys.stderr)
        self.scans.pop(rank, None)
        self.rows.pop(rank, None)
        self.with_events.discard(rank)
        self.missing_ranks = sorted({*self.missing_ranks, rank})
        if self._con is not None:
            _create_raw_events(self)
            _create_ranks(self)
        return line

    def move_clocks(self, shifts: dict[int, int]) -> None:
        """Move each rank's times ``shifts[rank]`` ns further (a correction of its
        clock offset found from the run's own order:
        :mod:`commlens.analysis.matched.clocks`): every view and read after this
        sees them moved. A loaded Run's events are aligned already: they stay."""
        self.shifts = {r: ns for r, ns in shifts.items() if ns} if self.scans else {}
        if not self.shifts:
            return
        for rank, ns in self.shifts.items():
            self.clocks[rank] = moved(self.clocks.get(rank, NO_CLOCK), ns)
        if self._con is not None:
            _create_events(self)
            _create_steps(self)

    def check_times(
        self, rank: int, step: np.ndarray, t_issue: np.ndarray, t_end: np.ndarray
    ) -> None:
        """Warn (once per line) about rank ``rank``'s events whose times cannot be
        (:func:`commlens.trace.sanity.event_problems`); ``t_issue``, ``t_end`` as
        :meth:`read_rank` gives them (on rank 0's clock), ``step`` their steps."""
        span = recording(self.info, rank)
        clock = self.clocks.get(rank, NO_CLOCK)
        if span is not None and moves(clock):
            lo, hi = (
                int(align_numpy(np.array([t]), clock)[0]) if t is not None else None for t in span
            )
            span = (lo, hi) if lo is not None else None
        for line in event_problems(rank, step, t_issue, t_end, span):
            self.note_problem(line)

    def note_problem(self, line: str) -> None:
        """Add ``line`` (a time that cannot be) to the problems and warnings, once."""
        if line in self.problems:
            return
        self.problems.append(line)
        self.warnings.append(line)
        if not self.quiet:
            print(f"commlens: warning: {line}", file=sys.stderr)

    def _read(self, rank: int, read: Callable[[], _T]) -> _T:
        try:
            return read()
        except (OSError, pa.ArrowException, ValueError) as exc:  # damaged pages
            raise RankDamaged(rank, self.drop_rank(rank, one_line(exc))) from None

    def read_rank(
        self, rank: int, columns: list[str], *, dictionary: bool = True, align: bool = True
    ) -> pa.Table:
        """One rank's events (only ``columns``; strings dictionary-encoded unless not
        ``dictionary``), in file order, times on rank 0's clock unless not ``align``.
        A rank whose file turns out damaged is dropped (:class:`RankDamaged`)."""
        src = self.sources.get(rank)
        if src is None:
            return self.sql(f"SELECT {', '.join(columns)} FROM events WHERE rank = {int(rank)}")
        wanted = columns
        if self.roles and "role" in columns and "pg_name" not in columns:
            columns = [*columns, "pg_name"]  # the role comes from the group
        step0 = _step0_from(self.info, rank) if "step" in columns else None
        if step0 is not None and "seq" not in columns:
            columns = [*columns, "seq"]
        if isinstance(src, Path):
            path = src
            strings = [c for c in columns if pa.types.is_string(EVENT_SCHEMA.field(c).type)]
            read_dict = strings if dictionary else None
            schema = pa.schema([EVENT_SCHEMA.field(c) for c in columns])

            def read() -> pa.Table:
                table = read_parquet(path, columns, read_dict)
                return table if dictionary else table.cast(schema)

            table = self._read(rank, read)
        else:
            table = src.select(columns)
        table = apply_roles(table, self.roles)
        if step0 is not None:
            table = _step0_events(table, step0)
        if columns is not wanted:
            table = table.select(wanted)
        clock = self.clocks.get(rank, NO_CLOCK) if align else NO_CLOCK
        if not moves(clock):
            return table
        for name in TIME_COLUMNS:
            if name in columns:
                t = align_numpy(table.column(name).to_numpy(), clock)
                table = table.set_column(
                    table.schema.get_field_index(name), name, pa.array(t, pa.int64())
                )
        return table

    def step_events(self, columns: list[str], steps: list[int]) -> pa.Table:
        """``columns`` of the events of ``steps``, times on rank 0's clock, as the
        ``events`` view gives them. A run directory's are read from its raw scans, the
        groups' roles and the ranks' clocks applied here, by column (the view applies
        them row by row in SQL: over a run of a thousand groups, three times the cost)."""
        chosen = ", ".join(str(int(s)) for s in steps) or "NULL"
        viewed = f"SELECT {', '.join(columns)} FROM events WHERE step IN ({chosen})"
        times = [c for c in TIME_COLUMNS if c in columns]
        if not self.scans or self.steps is not None:
            return self.sql(viewed)
        read = [*columns, "rank", *(["pg_name"] if "role" in columns and self.roles else [])]
        table = self.sql(
            f"SELECT {', '.join(dict.fromkeys(read))} FROM raw_events WHERE step IN ({chosen})"
        )
        if any(table.column(c).null_count for c in times):
            return self.sql(viewed)
        table = apply_roles(table, self.roles)
        rank = table.column("rank").to_numpy()
        size = max([int(rank.max()) + 1 if rank.size else 0, *(r + 1 for r in self.clocks)])
        offset, ref = np.zeros(size, np.int64), np.zeros(size, np.int64)
        drift = np.zeros(size)
        for r, clock in self.clocks.items():
            offset[r], drift[r], ref[r] = clock.offset_ns, clock.drift, clock.t_ref_ns
        for name in times:  # align_numpy's formula, each row by its rank's clock
            t = table.column(name).to_numpy()
            moved = t + offset[rank] + np.rint(drift[rank] * (t - ref[rank])).astype(np.int64)
            table = table.set_column(
                table.schema.get_field_index(name), name, pa.array(moved, pa.int64())
            )
        return table.select(columns)

    def read_device(self, rank: int, *, align: bool = True) -> pa.Table:
        """One rank's ``seq`` and device columns (``t_cpu_issue_ns`` on rank 0's clock
        unless not ``align``, ``stream``), in file order; all null for a rank whose file
        holds none (a run captured on a host, or written by format 1)."""
        src = self.sources.get(rank)
        fields = [pa.field(name, typ) for name, typ, _ in DEVICE_COLUMNS]
        if isinstance(src, Path):
            names = pq.ParquetFile(src).schema_arrow.names
            present = [f.name for f in fields if f.name in names]
            table = self._read(rank, lambda: read_parquet(src, ["seq", *present]))
        else:
            table = self.read_rank(rank, ["seq"]) if src is None else src.select(["seq"])
        for f in fields:
            if f.name not in table.column_names:
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        table = table.select(["seq", *DEVICE_COLUMN_NAMES])
        clock = self.clocks.get(rank, NO_CLOCK) if align else NO_CLOCK
        issue = table.column("t_cpu_issue_ns")
        if moves(clock) and issue.null_count < table.num_rows:
            valid = pc.is_valid(issue).to_numpy(zero_copy_only=False)
            t = align_numpy(pc.fill_null(issue, 0).to_numpy(), clock)
            table = table.set_column(1, "t_cpu_issue_ns", pa.array(t, pa.int64(), mask=~valid))
        return table

    def read_values(self, rank: int, column: str, rows: list[int]) -> list[Any]:
        """``column`` at the given rows (file order) of one rank, reading only the row
        groups that hold them."""
        src = self.sources.get(rank)
        if not isinstance(src, Path) or (column == "role" and self.roles):
            table = self.read_rank(rank, [column])
            return table.column(column).take(pa.array(rows, pa.int64())).to_pylist()
        path = src
        meta = pq.ParquetFile(path).metadata
        bounds = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        out: list[Any] = []
        cache: dict[int, pa.Table] = {}
        for row in rows:
            g = int(np.searchsorted(bounds, row, side="right")) - 1
            if g not in cache:
                read = functools.partial(pq.ParquetFile(path).read_row_group, g, columns=[column])
                cache[g] = self._read(rank, read)
            out.append(cache[g].column(column)[row - int(bounds[g])].as_py())
        return out

    def time_span(self) -> tuple[int, int] | None:
        """(first issue, last end) over all events, from Parquet statistics when possible."""
        span = self._span_from_statistics() if self.steps is None else None
        if span is not None:
            return span
        row = self.row("SELECT min(t_issue_ns), max(t_end_ns) FROM events")
        return (int(row[0]), int(row[1])) if row and row[0] is not None else None

    def _span_from_statistics(self) -> tuple[int, int] | None:
        """Alignment keeps the order of a rank's times, so the aligned extremes are
        the extremes of the row groups' statistics, aligned."""
        if not self.sources or not all(isinstance(s, Path) for s in self.sources.values()):
            return None
        lo: list[int] = []
        hi: list[int] = []
        for rank, src in self.sources.items():
            assert isinstance(src, Path)
            meta = pq.ParquetFile(src).metadata
            names = [meta.schema.column(i).name for i in range(meta.num_columns)]
            issue, end = names.index("t_issue_ns"), names.index("t_end_ns")
            mins: list[int] = []
            maxs: list[int] = []
            for g in range(meta.num_row_groups):
                a = meta.row_group(g).column(issue).statistics
                b = meta.row_group(g).column(end).statistics
                if a is None or b is None or not a.has_min_max or not b.has_min_max:
                    return None
                mins.append(int(a.min))
                maxs.append(int(b.max))
            clock = self.clocks.get(rank, NO_CLOCK)
            lo += align_numpy(np.array(mins, np.int64), clock).tolist()
            hi += align_numpy(np.array(maxs, np.int64), clock).tolist()
        return (min(lo), max(hi)) if lo else None

    def load(self, *, align_clocks: bool = True) -> Run:
        """Every event of the view's ranks in one table (the events schema), sorted by
        (rank, seq), times on rank 0's clock unless not ``align_clocks``; a rank
        whose file turns out damaged is left out."""
        tables = []
        columns = list(EVENT_SCHEMA.names)
        for rank in sorted(self.with_events):
            try:
                tables.append(self.read_rank(rank, columns, dictionary=False, align=align_clocks))
            except RankDamaged:
                continue
        events = pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()
        events = events.replace_schema_metadata(EVENT_SCHEMA.metadata)
        if events.num_rows:
            events = events.sort_by([("rank", "ascending"), ("seq", "ascending")])
        warnings, missing = list(self.warnings), list(self.missing_ranks)
        return Run(self.path, self.manifest, events, warnings, missing, self.info)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    def __enter__(self) -> RunView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_run(
    source: str | Path | Run,
    *,
    quiet: bool = True,
    threads: int = 0,
    steps: StepRange | None = None,
) -> RunView:
    """A :class:`RunView` of a run directory (scanned lazily) or of a loaded Run.

    Warnings go to stderr unless ``quiet``. ``steps`` = (first, stop) keeps
    only the events and step windows with first <= step < stop (either end
    may be None), e.g. (1, None) to leave out a warm-up step.
    """
    if isinstance(source, Run):
        roles, warnings = group_roles(source.checked)
        return RunView(
            source.path,
            source.manifest,
            source.checked,
            _new(source.warnings, warnings),
            list(source.missing_ranks),
            steps=steps,
            quiet=quiet,
            with_events=set(source.ranks),
            roles=roles,
            threads=threads,
            loaded=source.events,
        )
    run_dir = Path(source)
    found = open_files(run_dir)
    roles, warnings = group_roles(found.manifest)
    found.warnings.extend(warnings)
    view = RunView(
        run_dir,
        found.manifest.data,
        found.manifest,
        found.warnings,
        clocks=clocks(found.manifest),
        steps=steps,
        quiet=quiet,
        roles=roles,
        threads=threads,
    )
    for rank, file in found.files.items():
        view.sources[rank] = file
        select = _step0_sql(found.manifest, rank)
        view.scans[rank] = f"SELECT {select} FROM read_parquet('{_quote(file)}')"
    for rank, table in found.parts.items():
        view.sources[rank] = table
        view.scans[rank] = f"SELECT {_step0_sql(found.manifest, rank)} FROM parts_{rank}"
    view.rows = {r: _rows(src) for r, src in view.sources.items()}
    view.with_events = {r for r, n in view.rows.items() if n}
    view.missing_ranks = found.missing(view.with_events)
    view.problems = window_problems(found.manifest)
    view.warnings.extend(view.problems)
    if not quiet:
        for line in view.warnings:
            print(f"commlens: warning: {line}", file=sys.stderr)
    return view


def _create_views(view: RunView) -> None:
    """The views of :attr:`RunView.con` over the view's sources as they stand."""
    con = view.con
    if view.threads:
        con.execute(f"SET threads = {int(view.threads)}")
    if view.loaded is not None:
        con.register("all_events", view.loaded)  # already on rank 0's clock
        con.execute(
            f"CREATE VIEW events AS SELECT * REPLACE ({role_sql(view.roles)} AS role) "
            f"FROM all_events WHERE {step_filter(view.steps)}"
        )
    else:
        for rank, src in view.sources.items():
            if isinstance(src, pa.Table):
                con.register(f"parts_{rank}", src)
        con.register("empty_events", EVENT_SCHEMA.empty_table())
        _create_raw_events(view)
        _create_events(view)
    _create_steps(view)
    _create_ranks(view)


def load_run(path: str | Path, *, quiet: bool = False, align_clocks: bool = True) -> Run:
    """Load the run in ``path`` whole; warnings go to stderr unless ``quiet``."""
    with open_run(path) as view:
        run = view.load(align_clocks=align_clocks)
    if not quiet:
        for line in run.warnings:
            print(f"commlens: warning: {line}", file=sys.stderr)
    return run


def _step0_from(manifest: Manifest, rank: int) -> int | None:
    """The seq from which ``rank``'s set-up events are step 0's, if any
    (:data:`commlens.trace.schema.STEP0_FROM_SEQ`)."""
    info = manifest.ranks.get(rank)
    return None if info is None else info.step0_from_seq


def _step0_sql(manifest: Manifest, rank: int) -> str:
    """The select list of a rank's scan: its events, set-up ones from the rank's
    step-0 seq on counted in step 0."""
    since = _step0_from(manifest, rank)
    if since is None:
        return "*"
    return f"* REPLACE (CASE WHEN step = -1 AND seq >= {int(since)} THEN 0 ELSE step END AS step)"


def _step0_events(table: pa.Table, since: int) -> pa.Table:
    """``table`` with its set-up events from seq ``since`` on in step 0."""
    step = table.column("step")
    moved = pc.and_(pc.equal(step, -1), pc.greater_equal(table.column("seq"), since))
    fixed = pc.if_else(moved, pa.scalar(0, step.type), step)
    return table.set_column(table.schema.get_field_index("step"), "step", fixed)


def _create_raw_events(view: RunView) -> None:
    """``raw_events``: the union of every rank's scan (times as written)."""
    cols = ", ".join(EVENT_SCHEMA.names)
    scans = [*view.scans.values(), "SELECT * FROM empty_events"]
    union = " UNION ALL ".join(f"SELECT {cols} FROM ({s})" for s in scans)
    view.con.execute(f"CREATE OR REPLACE VIEW raw_events AS {union}")


def _new(seen: list[str], more: list[str]) -> list[str]:
    """``seen`` and the lines of ``more`` not in it already."""
    return [*seen, *(line for line in more if line not in seen)]


def _rows(src: Path | pa.Table) -> int:
    if isinstance(src, Path):
        return int(pq.ParquetFile(src).metadata.num_rows)
    return int(src.num_rows)


def _quote(path: Path) -> str:
    return str(path).replace("'", "''")


def _create_events(view: RunView) -> None:
    """``events``: the raw events, times on rank 0's clock by the view's clocks."""
    view.con.register("clocks", clock_table(view.clocks))
    aligned = ", ".join(f"{align_sql('e.' + c)} AS {c}" for c in TIME_COLUMNS)
    view.con.execute(
        f"CREATE OR REPLACE VIEW events AS SELECT e.* REPLACE ({aligned}, "
        f"{role_sql(view.roles, 'e.')} AS role) "
        f"FROM raw_events e LEFT JOIN clocks c ON e.rank = c.rank "
        f"WHERE {step_filter(view.steps, 'e.step')}"
    )


def _create_steps(view: RunView) -> None:
    view.con.register("all_steps", step_windows(view.info, view.shifts))
    view.con.execute(
        f"CREATE OR REPLACE VIEW steps AS SELECT * FROM all_steps WHERE {step_filter(view.steps)}"
    )


def _create_ranks(view: RunView) -> None:
    view.con.register("ranks", ranks_table(view.info, view.with_events, view.missing_ranks))
