"""Open a run for analysis: DuckDB views over its files, clocks aligned in SQL.

``load_run`` reads every event into Arrow, which is right for small runs and
too big for ten million events. ``open_run`` instead checks the manifest and
each rank file's footer, schema and statistics (the same rules as the reader,
:mod:`commlens.trace.files`: foreign files are a one-line
:class:`RunFormatError`, truncated, damaged or missing ranks a warning) and
lets DuckDB scan the Parquet files directly. A rank whose pages turn out
damaged when read is left out then, with a warning (:meth:`RunView.drop_rank`).
Views on ``RunView.con``:

- ``events``: every event, ``t_issue_ns``/``t_end_ns`` on rank 0's clock;
- ``steps``: ``rank, step, t_start_ns, t_end_ns, duration_s``, aligned too;
- ``ranks``: ``rank, status, host, events``.

``RunView.read_rank`` reads one rank's columns straight from its file with
pyarrow (strings dictionary-encoded), for the numpy pass of
:mod:`commlens.analysis.rankpass`. A step range given to :func:`open_run`
applies to all of these.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from commlens.errors import RunFormatError
from commlens.trace.files import (
    clock_table,
    clocks,
    one_line,
    open_files,
    ranks_table,
    step_table,
)
from commlens.trace.manifest import Manifest
from commlens.trace.reader import Run
from commlens.trace.schema import EVENT_SCHEMA


class RankDamaged(RunFormatError):
    """A rank's file failed while being read; the view has left the rank out."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


@dataclass
class RunView:
    """A run ready for analysis: manifest, warnings and a DuckDB connection."""

    path: Path
    manifest: dict[str, Any]
    con: duckdb.DuckDBPyConnection
    warnings: list[str] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    sources: dict[int, Path | pa.Table] = field(default_factory=dict)
    """Where each rank's raw events are: its Parquet file, or a table (parts, loaded run)."""
    clocks: dict[int, tuple[int, float, int]] = field(default_factory=dict)
    """rank -> (offset_ns, drift, t_ref_ns) to move raw times onto rank 0's clock."""
    aligned: bool = False
    """True when ``sources`` tables already hold aligned times (a loaded Run)."""
    steps: tuple[int | None, int | None] | None = None
    """Only steps first <= step < stop are seen (None: all); see :func:`open_run`."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Results computed once per run (see ``analysis.rankpass``, ``analysis.ops``)."""
    info: Manifest | None = None
    """The checked manifest (``manifest`` is its data)."""
    quiet: bool = True
    """Warnings found after opening (:meth:`drop_rank`) are printed unless quiet."""
    with_events: set[int] = field(default_factory=set)
    scans: dict[int, str] = field(default_factory=dict)
    """rank -> the SQL that reads its raw events (the union is ``raw_events``)."""

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def world_size(self) -> int:
        if self.info is not None and self.info.world_size is not None:
            return self.info.world_size
        row = self.row("SELECT max(rank) + 1 FROM events")
        return int(row[0]) if row and row[0] is not None else 0

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
        while True:
            try:
                return run()
            except duckdb.Error as exc:
                rank = self._rank_named_in(str(exc))
                if rank is None:
                    raise
                self.drop_rank(rank, one_line(exc))

    def _rank_named_in(self, message: str) -> int | None:
        for rank, src in self.sources.items():
            if isinstance(src, Path) and src.name in message:
                return rank
        return None

    def drop_rank(self, rank: int, reason: str) -> str:
        """Leave out ``rank``, whose file turned out damaged: it joins the missing
        ranks, its events leave the views and cached results are dropped."""
        src = self.sources.pop(rank, None)
        what = src.name if isinstance(src, Path) else f"rank {rank}'s flushed parts"
        line = f"{what} is damaged ({reason}): rank {rank} skipped"
        if src is None:
            return line
        self.warnings.append(line)
        if not self.quiet:
            print(f"commlens: warning: {line}", file=sys.stderr)
        self.scans.pop(rank, None)
        self.with_events.discard(rank)
        self.missing_ranks = sorted({*self.missing_ranks, rank})
        self.cache.clear()
        _create_raw_events(self)
        _create_ranks(self)
        return line

    def _read(self, rank: int, src: Path, read: Callable[[], _T]) -> _T:
        try:
            return read()
        except (OSError, pa.ArrowException, ValueError) as exc:  # damaged pages
            raise RankDamaged(rank, self.drop_rank(rank, one_line(exc))) from None

    def read_rank(self, rank: int, columns: list[str]) -> pa.Table:
        """One rank's events (only ``columns``; strings dictionary-encoded), in file
        order, with ``t_issue_ns``/``t_end_ns`` on rank 0's clock."""
        src = self.sources.get(rank)
        if src is None:
            return self.sql(f"SELECT {', '.join(columns)} FROM events WHERE rank = {int(rank)}")
        if isinstance(src, Path):
            strings = [c for c in columns if pa.types.is_string(EVENT_SCHEMA.field(c).type)]
            path = src
            table = self._read(
                rank, src, lambda: pq.read_table(path, columns=columns, read_dictionary=strings)
            )
        else:
            table = src.select(columns)
        if self.aligned or rank not in self.clocks:
            return table
        offset, drift, t_ref = self.clocks[rank]
        if offset == 0 and drift == 0.0:
            return table
        for name in ("t_issue_ns", "t_end_ns"):
            if name in columns:
                t = table.column(name).to_numpy()
                shifted = t + offset + np.rint(drift * (t - t_ref)).astype(np.int64)
                table = table.set_column(
                    table.schema.get_field_index(name), name, pa.array(shifted, pa.int64())
                )
        return table

    def read_values(self, rank: int, column: str, rows: list[int]) -> list[Any]:
        """``column`` at the given rows (file order) of one rank, reading only the row
        groups that hold them."""
        src = self.sources.get(rank)
        if not isinstance(src, Path):
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
                cache[g] = self._read(rank, path, read)
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
        if not self.sources or not all(isinstance(s, Path) for s in self.sources.values()):
            return None
        lo: list[int] = []
        hi: list[int] = []
        for rank, src in self.sources.items():
            assert isinstance(src, Path)
            meta = pq.ParquetFile(src).metadata
            names = [meta.schema.column(i).name for i in range(meta.num_columns)]
            issue, end = names.index("t_issue_ns"), names.index("t_end_ns")
            offset, drift, t_ref = self.clocks.get(rank, (0, 0.0, 0))
            for g in range(meta.num_row_groups):
                a = meta.row_group(g).column(issue).statistics
                b = meta.row_group(g).column(end).statistics
                if a is None or b is None or not a.has_min_max or not b.has_min_max:
                    return None
                lo.append(int(a.min) + offset + round(drift * (int(a.min) - t_ref)))
                hi.append(int(b.max) + offset + round(drift * (int(b.max) - t_ref)))
        return (min(lo), max(hi)) if lo else None

    def close(self) -> None:
        self.con.close()


StepRange = tuple[int | None, int | None]
_P = ParamSpec("_P")
_T = TypeVar("_T")


def accepts_run(
    fn: Callable[Concatenate[RunView, _P], _T],
) -> Callable[Concatenate[RunView | Run | str | Path, _P], _T]:
    """Let an analysis take a :class:`RunView`, a loaded :class:`Run` or a run directory."""

    @functools.wraps(fn)
    def wrapper(run: RunView | Run | str | Path, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return fn(run if isinstance(run, RunView) else open_run(run), *args, **kwargs)

    return wrapper


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


def open_run(
    source: str | Path | Run,
    *,
    quiet: bool = True,
    threads: int = 0,
    steps: StepRange | None = None,
) -> RunView:
    """A :class:`RunView` of a run directory (scanned lazily) or of a loaded Run.

    ``steps`` = (first, stop) keeps only the events and step windows with
    first <= step < stop (either end may be None), e.g. (1, None) to leave out
    a warm-up step.
    """
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    where = step_filter(steps)
    if isinstance(source, Run):
        con.register("all_events", source.events)  # already on rank 0's clock
        con.execute(f"CREATE VIEW events AS SELECT * FROM all_events WHERE {where}")
        view = RunView(
            source.path,
            source.manifest,
            con,
            list(source.warnings),
            list(source.missing_ranks),
            steps=steps,
            info=source.checked,
            quiet=quiet,
            with_events=set(source.ranks),
        )
        _create_steps(view)
        _create_ranks(view)
        return view
    run_dir = Path(source)
    try:
        found = open_files(run_dir)
    except BaseException:
        con.close()
        raise
    view = RunView(
        run_dir,
        found.manifest.data,
        con,
        found.warnings,
        clocks=clocks(found.manifest),
        steps=steps,
        info=found.manifest,
        quiet=quiet,
    )
    for rank, file in found.files.items():
        view.sources[rank] = file
        view.scans[rank] = f"SELECT * FROM read_parquet('{_quote(file)}')"
    for rank, table in found.parts.items():
        con.register(f"parts_{rank}", table)
        view.sources[rank] = table
        view.scans[rank] = f"SELECT * FROM parts_{rank}"
    con.register("empty_events", EVENT_SCHEMA.empty_table())
    _create_raw_events(view)
    con.register("clocks", clock_table(found.manifest))
    con.execute(
        "CREATE VIEW events AS SELECT e.* REPLACE ("
        + _aligned("e.t_issue_ns")
        + " AS t_issue_ns, "
        + _aligned("e.t_end_ns")
        + " AS t_end_ns"
        + ") FROM raw_events e LEFT JOIN clocks c ON e.rank = c.rank"
        + f" WHERE {step_filter(steps, 'e.step')}"
    )
    view.with_events = {r for r, src in view.sources.items() if _has_rows(src)}
    view.missing_ranks = found.missing(view.with_events)
    _create_steps(view)
    _create_ranks(view)
    if not quiet:
        for line in view.warnings:
            print(f"commlens: warning: {line}", file=sys.stderr)
    return view


def _create_raw_events(view: RunView) -> None:
    """``raw_events``: the union of every rank's scan (times as written)."""
    cols = ", ".join(EVENT_SCHEMA.names)
    scans = [*view.scans.values(), "SELECT * FROM empty_events"]
    union = " UNION ALL ".join(f"SELECT {cols} FROM ({s})" for s in scans)
    view.con.execute(f"CREATE OR REPLACE VIEW raw_events AS {union}")


def _has_rows(src: Path | pa.Table) -> bool:
    if isinstance(src, Path):
        return pq.ParquetFile(src).metadata.num_rows > 0
    return src.num_rows > 0


def _quote(path: Path) -> str:
    return str(path).replace("'", "''")


def _aligned(col: str) -> str:
    """``t + offset + drift·(t − t_ref)``: the reader's clock mapping, in SQL."""
    return (
        f"({col} + coalesce(c.offset_ns, 0) + CAST(round(coalesce(c.drift, 0.0) * "
        f"({col} - coalesce(c.t_ref_ns, 0))) AS BIGINT))"
    )


def _create_steps(view: RunView) -> None:
    """Per-rank step windows from the manifest, moved onto rank 0's clock."""
    assert view.info is not None
    rows = step_table(view.info)
    view.con.register(
        "raw_steps",
        pa.table(
            {
                "rank": pa.array(rows["rank"], pa.int32()),
                "step": pa.array(rows["step"], pa.int32()),
                "t_start_ns": pa.array(rows["t_start_ns"], pa.int64()),
                "t_end_ns": pa.array(rows["t_end_ns"], pa.int64()),
            }
        ),
    )
    if "clocks" not in {r[0] for r in view.con.execute("SHOW TABLES").fetchall()}:
        view.con.register("clocks", clock_table(view.info))
    view.con.execute(
        "CREATE VIEW steps AS SELECT s.rank, s.step, "
        + _aligned("s.t_start_ns")
        + " AS t_start_ns, "
        + _aligned("s.t_end_ns")
        + " AS t_end_ns, "
        "(s.t_end_ns - s.t_start_ns) / 1e9 AS duration_s "
        "FROM raw_steps s LEFT JOIN clocks c ON s.rank = c.rank "
        f"WHERE {step_filter(view.steps, 's.step')}"
    )


def _create_ranks(view: RunView) -> None:
    assert view.info is not None
    view.con.register("ranks", ranks_table(view.info, view.with_events, view.missing_ranks))
