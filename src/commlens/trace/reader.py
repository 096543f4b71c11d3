"""Read a run directory: manifest plus every rank's events.

Readers accept any rank count, tolerate a missing or truncated rank file with
a warning (the rank is listed in ``Run.missing_ranks``), and reject foreign or
corrupt files with a one-line :class:`RunFormatError` naming the file. Event
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
    check_rank_file,
    clocks,
    expected_ranks,
    ranks_without_events,
    read_parts,
    scan,
)
from commlens.trace.schema import EVENT_SCHEMA
from commlens.trace.writer import parts_dir


@dataclass
class Run:
    """A loaded run: its manifest, its events and what could not be read."""

    path: Path
    manifest: dict[str, Any]
    events: pa.Table
    warnings: list[str] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        size = self.manifest.get("world_size")
        if isinstance(size, int):
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
        rows: dict[str, list[Any]] = {"rank": [], "step": [], "t_start_ns": [], "t_end_ns": []}
        offsets = clocks(self.manifest)
        for key, meta in self.manifest.get("ranks", {}).items():
            offset, drift, t_ref = offsets.get(int(key), (0, 0.0, 0))
            for step in meta.get("steps", []):
                rows["rank"].append(int(key))
                rows["step"].append(int(step["step"]))
                for col in ("t_start_ns", "t_end_ns"):
                    t = int(step[col])
                    rows[col].append(t + offset + round(drift * (t - t_ref)))
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
        ranks = self.manifest.get("ranks", {})
        keys = sorted(set(int(k) for k in ranks) | set(self.ranks) | set(self.missing_ranks))
        return pa.table(
            {
                "rank": pa.array(keys, pa.int32()),
                "status": pa.array(
                    [
                        "missing"
                        if r in self.missing_ranks
                        else ranks.get(str(r), {}).get("status", "unknown")
                        for r in keys
                    ],
                    pa.string(),
                ),
                "host": pa.array([ranks.get(str(r), {}).get("host", "") for r in keys]),
                "events": pa.array(
                    [int(ranks.get(str(r), {}).get("events", 0)) for r in keys], pa.int64()
                ),
            }
        )


def load_run(path: str | Path, *, quiet: bool = False, align_clocks: bool = True) -> Run:
    """Load the run in ``path``; warnings go to stderr unless ``quiet``."""
    run_dir = Path(path)
    manifest, files, part_ranks = scan(run_dir)
    warnings: list[str] = []
    tables: list[pa.Table] = []
    seen: set[int] = set()
    for rank, file in files.items():
        seen.add(rank)
        if not check_rank_file(file, rank, warnings):
            continue
        try:
            table = pq.ParquetFile(file).read(columns=EVENT_SCHEMA.names)
        except Exception as exc:
            warnings.append(f"{file.name} is damaged ({exc}): rank {rank} skipped")
            continue
        tables.append(table.cast(EVENT_SCHEMA))
    for rank in part_ranks:
        table = read_parts(parts_dir(run_dir, rank))
        seen.add(rank)
        warnings.append(
            f"rank {rank} did not finish: read {table.num_rows} events from its flushed parts"
        )
        tables.append(table)
    events = pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()
    events = events.replace_schema_metadata(EVENT_SCHEMA.metadata)
    read_ranks = set(pc.unique(events.column("rank")).to_pylist()) if events.num_rows else set()
    expected = expected_ranks(manifest)
    missing = sorted((expected | seen) - read_ranks - ranks_without_events(manifest))
    for rank in missing:
        if rank not in seen:
            warnings.append(f"rank {rank}: no events file (rank-{rank:05d}.parquet is missing)")
    if align_clocks and events.num_rows:
        events = _align(events, manifest)
    if events.num_rows:
        events = events.sort_by([("rank", "ascending"), ("seq", "ascending")])
    if not quiet:
        for line in warnings:
            print(f"commlens: warning: {line}", file=sys.stderr)
    return Run(run_dir, manifest, events, warnings, missing)


def _align(events: pa.Table, manifest: dict[str, Any]) -> pa.Table:
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
