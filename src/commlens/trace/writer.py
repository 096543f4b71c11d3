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

import pyarrow as pa
import pyarrow.parquet as pq

from commlens.trace.schema import EVENT_COLUMNS, EVENT_SCHEMA, RANK_KEY


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
                len(rows) >= self.flush_events
                or time.monotonic() - self._last_flush >= self.flush_seconds
            ):
                self._flush_locked()

    @property
    def buffered(self) -> int:
        """Events held in memory, not yet flushed."""
        return len(self._rows)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows:
            return
        columns = list(zip(*self._rows, strict=True))
        self._rows = []
        table = pa.table(
            {
                name: pa.array(values, type=self.schema.field(name).type)
                for name, values in zip(EVENT_COLUMNS, columns, strict=True)
            },
            schema=self.schema,
        )
        path = self._parts / f"part-{self._n_parts:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        self._n_parts += 1

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
