"""Read a run directory: manifest plus every rank's events.

Readers accept any rank count, tolerate a missing, truncated or damaged rank
file with a warning (the rank is listed in ``Run.missing_ranks``), and reject
foreign files or a bad manifest with a one-line :class:`RunFormatError` naming
the file (the rules are in :mod:`commlens.trace.files`). Event
times are moved onto rank 0's clock using each rank's measured offset and
drift (see ``commlens.capture.clock``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commlens.trace.files import (
    clocks,
    one_line,
    open_files,
    ranks_table,
    step_table,
)
from commlens.trace.manifest import Manifest, read_manifest
from commlens.trace.schema import EVENT_SCHEMA


@dataclass
class Run:
    """A loaded run: its manifest, its events and what could not be read."""

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
        ranks = self.events.column("rank").to_pylist() if self.events.num_rows else []
        return (max(ranks) + 1) if ranks else 0

    @property
    def ranks(self) -> list[int]:
        """Ranks whose events were read."""
        if not self.events.num_rows:
            return []
        return sorted(int(r) for r in pc.unique(self.events.column("rank")).to_pylist())

    def duckdb(self) -> Any:
        """A DuckDB connection with views ``events``, ``steps`` and ``ranks``."""
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
        rows = step_table(self.checked)
        offsets = clocks(self.checked)
        for col in ("t_start_ns", "t_end_ns"):
            rows[col] = [
                t + offset + round(drift * (t - t_ref))
                for r, t in zip(rows["rank"], rows[col], strict=True)
                for offset, drift, t_ref in [offsets.get(r, (0, 0.0, 0))]
            ]
        return pa.table(
            {
                "rank": pa.array(rows["rank"], pa.int32()),
                "step": pa.array(rows["step"], pa.int32()),
                "t_start_ns": pa.array(rows["t_start_ns"], pa.int64()),
                "t_end_ns": pa.array(rows["t_end_ns"], pa.int64()),
                "duration_s": pa.array(
                    [
                        (e - s) / 1e9
                        for s, e in zip(rows["t_start_ns"], rows["t_end_ns"], strict=True)
                    ],
                    pa.float64(),
                ),
            }
        )

    def ranks_table(self) -> pa.Table:
        return ranks_table(self.checked, set(self.ranks), self.missing_ranks)


def load_run(path: str | Path, *, quiet: bool = False, align_clocks: bool = True) -> Run:
    """Load the run in ``path``; warnings go to stderr unless ``quiet``."""
    run_dir = Path(path)
    found = open_files(run_dir)
    tables: list[pa.Table] = []
    for rank, file in found.files.items():
        try:
            table = pq.ParquetFile(file).read(columns=EVENT_SCHEMA.names)
            tables.append(table.cast(EVENT_SCHEMA))
        except (OSError, pa.ArrowException, ValueError) as exc:  # damaged pages: rank left out
            found.warnings.append(f"{file.name} is damaged ({one_line(exc)}): rank {rank} skipped")
            found.skipped.add(rank)
    tables += found.parts.values()
    events = pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()
    events = events.replace_schema_metadata(EVENT_SCHEMA.metadata)
    read_ranks = set(pc.unique(events.column("rank")).to_pylist()) if events.num_rows else set()
    missing = found.missing(read_ranks)
    manifest = found.manifest
    warnings = found.warnings
    if align_clocks and events.num_rows:
        events = _align(events, manifest)
    if events.num_rows:
        events = events.sort_by([("rank", "ascending"), ("seq", "ascending")])
    if not quiet:
        for line in warnings:
            print(f"commlens: warning: {line}", file=sys.stderr)
    return Run(run_dir, manifest.data, events, warnings, missing, manifest)


def _align(events: pa.Table, manifest: Manifest) -> pa.Table:
    """Shift each rank's times onto rank 0's clock: t + offset + drift·(t − t0)."""
    ranks = events.column("rank").to_numpy()
    issue = events.column("t_issue_ns").to_numpy().copy()
    end = events.column("t_end_ns").to_numpy().copy()
    changed = False
    for rank, (offset, drift, t0) in clocks(manifest).items():
        mask = ranks == rank
        if not mask.any() or (offset == 0 and drift == 0.0):
            continue
        changed = True
        for arr in (issue, end):
            shift = offset + np.rint(drift * (arr[mask] - t0)).astype(np.int64)
            arr[mask] = arr[mask] + shift
    if not changed:
        return events
    events = events.set_column(
        events.schema.get_field_index("t_issue_ns"), "t_issue_ns", pa.array(issue, pa.int64())
    )
    return events.set_column(
        events.schema.get_field_index("t_end_ns"), "t_end_ns", pa.array(end, pa.int64())
    )
