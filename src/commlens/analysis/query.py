"""A read-only SQL session over one run: DuckDB sees the run's views and nothing else.

:func:`open_query` opens the run with :func:`commlens.trace.reader.open_run`
(an in-memory database), hands the rank files to DuckDB as pyarrow datasets
rather than file paths, then locks the connection down with DuckDB's own
controls:

- ``enable_external_access = false``: no file or URL is opened by SQL, so
  ``COPY … TO``, ``EXPORT``, ``ATTACH 'file'``, ``INSTALL``, loading external
  extensions and table functions such as ``read_csv`` all fail;
- extensions are neither installed nor loaded on demand, Python variables are
  not scanned by name;
- ``lock_configuration = true``: no ``SET``, ``RESET`` or configuring ``PRAGMA``
  can undo the above.

The rank files are not listed in ``allowed_paths``: DuckDB lets an allowed
path be written as well as read. Spilling goes to a private temporary
directory, removed on :meth:`QuerySession.close`.

:meth:`QuerySession.execute` runs a statement on a worker thread and yields
its result as Arrow record batches through a small queue, so memory stays
bounded whatever the result's size, and a ``KeyboardInterrupt`` in the
caller's thread interrupts DuckDB (``con.interrupt()``) when the result is
closed.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from commlens.errors import UsageError
from commlens.tempdirs import make_temp_dir
from commlens.trace.reader import RunView, open_run
from commlens.trace.schema import EVENT_SCHEMA

BATCH_ROWS = 65_536
"""Rows per record batch handed from DuckDB to the renderer."""

_LOCKDOWN = (
    "SET python_enable_replacements = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)

_WHAT_A_QUERY_MAY_DO = "a query reads only the run's views events, steps and ranks"


class QueryError(UsageError):
    """A statement DuckDB refused or failed to run."""


class QuerySession:
    """A locked-down DuckDB connection over one run (see the module docstring)."""

    def __init__(self, view: RunView, temp_dir: Path) -> None:
        self.view = view
        self.temp_dir = temp_dir
        self._busy: QueryResult | None = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        return self.view.con

    def execute(self, sql: str, batch_rows: int = BATCH_ROWS) -> QueryResult:
        """Start ``sql``; iterate the returned result (a context manager) for its batches."""
        return QueryResult(self, sql, batch_rows)

    @property
    def running(self) -> bool:
        """Whether a statement's worker still runs (DuckDB has not yet stopped it)."""
        return self._busy is not None and self._busy.running

    def close(self) -> None:
        """Stop a statement still running; close the connection (unless the statement is
        still unwinding) and the temp dir."""
        if self._busy is not None:
            self._busy.close()
        if self._busy is None or not self._busy.thread.is_alive():
            self.view.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> QuerySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_query(run: str | Path, *, quiet: bool = True) -> QuerySession:
    """A :class:`QuerySession` over the run directory ``run``."""
    view = open_run(run, quiet=quiet)
    temp_dir = make_temp_dir("query")  # a killed query's is reclaimed at the next
    try:
        _scan_with_arrow(view)
        view.con.execute(f"SET temp_directory = '{_quote(str(temp_dir))}'")
        for statement in _LOCKDOWN:
            view.con.execute(statement)
    except BaseException:
        view.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return QuerySession(view, temp_dir)


def _scan_with_arrow(view: RunView) -> None:
    """Serve every rank's events from a registered Arrow source instead of a file path,
    so the views keep working once DuckDB may open no file."""
    cols = ", ".join(EVENT_SCHEMA.names)
    # Strings read dictionary-encoded: DuckDB still sees VARCHAR, and scans them
    # two to three times faster than as plain Arrow strings.
    strings = [f.name for f in EVENT_SCHEMA if pa.types.is_string(f.type)]
    parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=strings))
    parts = []
    for rank, src in sorted(view.sources.items()):
        name = f"rank_{rank}_events"
        data = ds.dataset(str(src), format=parquet) if isinstance(src, Path) else src
        view.con.register(name, data)
        parts.append(f"SELECT {cols} FROM {name}")
    view.con.register("no_events", EVENT_SCHEMA.empty_table())
    parts.append(f"SELECT {cols} FROM no_events")
    view.con.execute("CREATE OR REPLACE VIEW raw_events AS " + " UNION ALL ".join(parts))


def _quote(text: str) -> str:
    return text.replace("'", "''")


def explain(exc: BaseException) -> str:
    """A DuckDB error as one line, saying what a query may do when it was refused."""
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else type(exc).__name__
    refused = isinstance(exc, duckdb.PermissionException) or any(
        mark in message for mark in ("Permission Error", "configuration has been locked")
    )
    return f"{message} ({_WHAT_A_QUERY_MAY_DO})" if refused else message


_END = object()


class QueryResult:
    """One statement running on a worker thread; iterate for its record batches.

    Use it as a context manager: leaving the block early (an error, a closed
    pipe, ``KeyboardInterrupt``) interrupts the statement and waits for the
    worker to stop.
    """

    def __init__(self, session: QuerySession, sql: str, batch_rows: int) -> None:
        self._con = session.con
        self._sql = sql
        self._batch_rows = batch_rows
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._stop = threading.Event()
        self._schema: pa.Schema | None = None
        self.thread = threading.Thread(target=self._work, name="commlens-query", daemon=True)
        # Known to the session before the worker starts: a Ctrl-C while it starts
        # still finds it, so the session stops it before closing the connection.
        session._busy = self
        self.thread.start()

    # worker thread ------------------------------------------------------------------

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        try:
            relation = self._con.sql(self._sql)
            if relation is None:  # a statement without a result
                self._put(pa.schema([]))
                self._put(_END)
                return
            if self._stop.is_set():
                return
            reader = relation.to_arrow_reader(self._batch_rows)
            if not self._put(reader.schema):
                return
            for batch in reader:
                if not self._put(batch):
                    return
            self._put(_END)
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            # DuckDB's own errors, and the same errors met while reading the
            # result (pyarrow passes them on as OSError)
            self._put(QueryError(f"query failed: {explain(exc)}"))
        except BaseException as exc:  # handed to the caller's thread
            self._put(exc)

    # caller's thread ----------------------------------------------------------------

    def _next(self) -> Any:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                if not self.thread.is_alive() and self._queue.empty():
                    return _END
                continue
            if isinstance(item, QueryError):
                raise QueryError(str(item)) from None
            if isinstance(item, BaseException):
                raise item
            return item

    @property
    def running(self) -> bool:
        """Whether the worker still runs (DuckDB has not yet stopped the statement)."""
        return self.thread.is_alive()

    @property
    def schema(self) -> pa.Schema:
        """The result's columns (waits until DuckDB has planned the statement)."""
        if self._schema is None:
            item = self._next()
            self._schema = item if isinstance(item, pa.Schema) else pa.schema([])
        return self._schema

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        _ = self.schema
        while True:
            item = self._next()
            if item is _END:
                return
            yield item

    def close(self, timeout: float = 5.0) -> None:
        """Stop the statement if it still runs, and wait (up to ``timeout`` s) for the worker."""
        if self._stop.is_set():
            return  # asked already
        self._stop.set()
        deadline = time.monotonic() + timeout
        # An interrupt that comes before DuckDB starts executing is lost, so it is
        # repeated until the worker has stopped.
        while self.thread.is_alive() and time.monotonic() < deadline:
            self._con.interrupt()
            self.thread.join(0.05)

    def __enter__(self) -> QueryResult:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
