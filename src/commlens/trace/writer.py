"""Streaming writer of one rank's events.

Events are buffered column-wise and flushed as one Parquet row group every
``flush_events`` events or ``flush_seconds`` seconds, whichever comes first,
into ``.rank-NNNNN.parts/``. Each flushed part is a complete Parquet file, so
a rank killed mid-run loses at most its unflushed buffer. ``close()`` joins
the parts (one at a time: memory stays bounded) into ``rank-NNNNN.parquet``,
renames it into place atomically and removes the parts.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commlens.trace.schema import EVENT_COLUMNS, EVENT_SCHEMA, RANK_KEY

# What is constant per call site, and what the fast path stores per event.
SITE_FIELDS = ("op", "api", "pg_name", "pg_ranks", "group_size", "role", "dtype", "phase", "module")
COMPACT_FIELDS = (
    "site",
    "seq",
    "count",
    "bytes_in",
    "bytes_out",
    "size_bytes",
    "peer",
    "is_async",
    "t_issue_ns",
    "t_end_ns",
    "t_wait_ns",
    "step",
)


def rank_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank:05d}.parquet"


def parts_dir(run_dir: Path, rank: int) -> Path:
    return run_dir / f".rank-{rank:05d}.parts"


class EventWriter:
    """Append events of one rank; flush in row groups; finish into one file."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        *,
        flush_events: int = 16384,
        flush_seconds: float = 2.0,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.flush_events = flush_events
        self.flush_seconds = flush_seconds
        self.schema = EVENT_SCHEMA.with_metadata(
            {**(EVENT_SCHEMA.metadata or {}), RANK_KEY: str(rank).encode()}
        )
        self._rows: list[tuple[Any, ...]] = []
        # The capture's fast path: rows of COMPACT_FIELDS whose constant part
        # (op, group, role, phase, module...) is one interned "site".
        self._compact: list[tuple[Any, ...]] = []
        self._sites: list[tuple[Any, ...]] = []
        self._site_ids: dict[tuple[Any, ...], int] = {}
        self._lock = threading.Lock()
        self._parts = parts_dir(self.run_dir, rank)
        self._parts.mkdir(parents=True, exist_ok=True)
        self._n_parts = 0
        self._last_flush = time.monotonic()
        self.n_events = 0
        self.closed = False

    def append(self, row: tuple[Any, ...]) -> None:
        """Add one event, given as a tuple in EVENT_COLUMNS order."""
        with self._lock:
            rows = self._rows
            rows.append(row)
            self.n_events += 1
            if (
                len(rows) + len(self._compact) >= self.flush_events
                or time.monotonic() - self._last_flush >= self.flush_seconds
            ):
                self._flush_locked()

    def site(self, key: tuple[Any, ...]) -> int:
        """The id of a call site: a tuple of SITE_FIELDS values."""
        sid = self._site_ids.get(key)
        if sid is None:
            with self._lock:
                sid = self._site_ids.setdefault(key, len(self._sites))
                if sid == len(self._sites):
                    self._sites.append(key)
        return sid

    def append_compact(self, row: tuple[Any, ...]) -> None:
        """Add one event as a tuple of COMPACT_FIELDS (``site`` from :meth:`site`)."""
        with self._lock:
            rows = self._compact
            rows.append(row)
            self.n_events += 1
            if (
                len(rows) >= self.flush_events
                or time.monotonic() - self._last_flush >= self.flush_seconds
            ):
                self._flush_locked()

    @property
    def buffered(self) -> int:
        """Events held in memory, not yet flushed."""
        return len(self._rows) + len(self._compact)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        tables = []
        if self._rows:
            columns = list(zip(*self._rows, strict=True))
            self._rows = []
            tables.append(
                pa.table(
                    {
                        name: pa.array(values, type=self.schema.field(name).type)
                        for name, values in zip(EVENT_COLUMNS, columns, strict=True)
                    },
                    schema=self.schema,
                )
            )
        if self._compact:
            tables.append(self._expand(self._compact))
            self._compact = []
        if not tables:
            return
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        path = self._parts / f"part-{self._n_parts:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        self._n_parts += 1

    def _expand(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        """Compact rows to a table of EVENT_COLUMNS: sites expand by one take()."""
        columns = dict(zip(COMPACT_FIELDS, zip(*rows, strict=True), strict=True))
        site_ids = pa.array(columns.pop("site"), pa.int32())
        site_columns = zip(*self._sites, strict=True)
        arrays: dict[str, Any] = {
            "rank": pa.array(np.full(len(rows), self.rank, dtype=np.int32)),
        }
        for name, values in zip(SITE_FIELDS, site_columns, strict=True):
            arrays[name] = pa.array(values, type=self.schema.field(name).type).take(site_ids)
        for name, values in columns.items():
            arrays[name] = pa.array(values, type=self.schema.field(name).type)
        elapsed = pc.subtract(arrays["t_end_ns"], arrays["t_issue_ns"])
        arrays["duration_s"] = pc.divide(elapsed.cast(pa.float64()), 1e9)
        return pa.table([arrays[name] for name in EVENT_COLUMNS], schema=self.schema)

    def close(self) -> Path:
        """Flush, join the parts into the rank file and return its path."""
        with self._lock:
            if self.closed:
                return rank_file(self.run_dir, self.rank)
            self._flush_locked()
            self.closed = True
            final = rank_file(self.run_dir, self.rank)
            tmp = final.with_name(f".{final.name}.tmp")
            with pq.ParquetWriter(tmp, self.schema, compression="zstd") as out:
                for part in sorted(self._parts.glob("part-*.parquet")):
                    out.write_table(pq.read_table(part, schema=self.schema))
                if self._n_parts == 0:
                    out.write_table(self.schema.empty_table())
            os.replace(tmp, final)
            shutil.rmtree(self._parts, ignore_errors=True)
            return final
