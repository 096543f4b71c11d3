"""Read a run directory: manifest plus every rank's events.

Readers accept any rank count, tolerate a missing or truncated rank file with
a warning (the rank is listed in ``Run.missing_ranks``), and reject foreign or
corrupt files with a one-line :class:`RunFormatError` naming the file. Event
times are moved onto rank 0's clock using each rank's measured offset and
drift (see ``commlens.capture.clock``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commlens.errors import RunFormatError
from commlens.trace.manifest import FORMAT_NAME, MANIFEST, collect_rank_meta, read_json
from commlens.trace.schema import EVENT_SCHEMA, RANK_KEY, SCHEMA_KEY
from commlens.trace.writer import parts_dir

_RANK_FILE = re.compile(r"^rank-(\d{5,})\.parquet$")


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
        for key, meta in self.manifest.get("ranks", {}).items():
            shift = clock_shift(meta.get("clock") or {})
            for step in meta.get("steps", []):
                rows["rank"].append(int(key))
                rows["step"].append(int(step["step"]))
                rows["t_start_ns"].append(shift(int(step["t_start_ns"])))
                rows["t_end_ns"].append(shift(int(step["t_end_ns"])))
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
    if not run_dir.is_dir():
        raise RunFormatError(f"{run_dir}: no such run directory")
    manifest_path = run_dir / MANIFEST
    manifest: dict[str, Any] = {}
    if manifest_path.exists():
        manifest = read_json(manifest_path)
        if manifest.get("format") != FORMAT_NAME:
            raise RunFormatError(f"{manifest_path}: not a commlens run manifest")
    manifest["ranks"] = {**manifest.get("ranks", {}), **collect_rank_meta(run_dir)}
    files = _rank_files(run_dir)
    if not manifest_path.exists() and not files and not manifest["ranks"]:
        raise RunFormatError(f"{run_dir}: not a commlens run (no run.json or rank-*.parquet)")

    warnings: list[str] = []
    tables: list[pa.Table] = []
    seen: set[int] = set()
    for rank, file in files.items():
        table = _read_rank_file(file, rank, warnings)
        seen.add(rank)
        if table is not None:
            tables.append(table)
    for rank in _ranks_with_parts_only(run_dir, files):
        table = _read_parts(run_dir, rank)
        seen.add(rank)
        warnings.append(
            f"rank {rank} did not finish: read {table.num_rows} events from its flushed parts"
        )
        tables.append(table)
    events = pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()
    events = events.replace_schema_metadata(EVENT_SCHEMA.metadata)
    read_ranks = set(pc.unique(events.column("rank")).to_pylist()) if events.num_rows else set()
    expected = _expected_ranks(manifest)
    missing = sorted((expected | seen) - read_ranks - _ranks_without_events(manifest))
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


def _rank_files(run_dir: Path) -> dict[int, Path]:
    files: dict[int, Path] = {}
    for file in sorted(run_dir.iterdir()):
        match = _RANK_FILE.match(file.name)
        if match:
            files[int(match.group(1))] = file
    return files


def _read_rank_file(file: Path, rank: int, warnings: list[str]) -> pa.Table | None:
    with open(file, "rb") as fh:
        head = fh.read(4)
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - 4))
        tail = fh.read(4)
    if head != b"PAR1":
        raise RunFormatError(f"{file}: not a Parquet file, so not a commlens events file")
    if tail != b"PAR1":
        warnings.append(f"{file.name} is truncated ({size} bytes, no footer): rank {rank} skipped")
        return None
    try:
        parquet = pq.ParquetFile(file)
        schema = parquet.schema_arrow
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise RunFormatError(f"{file}: corrupt Parquet file ({exc})") from None
    metadata = schema.metadata or {}
    if SCHEMA_KEY not in metadata:
        raise RunFormatError(f"{file}: not a commlens events file (foreign Parquet schema)")
    if metadata.get(RANK_KEY) not in (None, str(rank).encode()):
        raise RunFormatError(f"{file}: holds rank {metadata[RANK_KEY].decode()}, not {rank}")
    missing = [name for name in EVENT_SCHEMA.names if name not in schema.names]
    if missing:
        raise RunFormatError(f"{file}: missing columns {', '.join(missing)}")
    try:
        table = parquet.read(columns=EVENT_SCHEMA.names)
    except Exception as exc:
        warnings.append(f"{file.name} is damaged ({exc}): rank {rank} skipped")
        return None
    return table.cast(EVENT_SCHEMA)


def _ranks_with_parts_only(run_dir: Path, files: dict[int, Path]) -> list[int]:
    ranks = []
    for part_dir in run_dir.glob(".rank-*.parts"):
        rank = int(part_dir.name[len(".rank-") : -len(".parts")])
        if rank not in files:
            ranks.append(rank)
    return sorted(ranks)


def _read_parts(run_dir: Path, rank: int) -> pa.Table:
    tables = []
    for part in sorted(parts_dir(run_dir, rank).glob("part-*.parquet")):
        try:
            tables.append(pq.read_table(part).select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA))
        except Exception:  # a part being written when the rank died
            continue
    return pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()


def _expected_ranks(manifest: dict[str, Any]) -> set[int]:
    size = manifest.get("world_size")
    ranks = {int(k) for k in manifest.get("ranks", {})}
    if isinstance(size, int):
        ranks |= set(range(size))
    return ranks


def _ranks_without_events(manifest: dict[str, Any]) -> set[int]:
    """Ranks that finished cleanly having issued no communication at all."""
    return {
        int(k)
        for k, meta in manifest.get("ranks", {}).items()
        if meta.get("status") == "ok" and int(meta.get("events", 0)) == 0
    }


def clock_shift(clock: dict[str, Any]) -> Any:
    """The map of one rank's time t onto rank 0's clock: t + offset + drift·(t − t_ref)."""
    if "offset_ns" not in clock:
        return lambda t: t
    offset = int(clock["offset_ns"])
    drift = float(clock.get("drift", 0.0))
    t_ref = int(clock.get("t_ref_ns", 0))
    return lambda t: t + offset + round(drift * (t - t_ref))


def _align(events: pa.Table, manifest: dict[str, Any]) -> pa.Table:
    """Shift each rank's times onto rank 0's clock: t + offset + drift·(t − t0)."""
    ranks = events.column("rank").to_numpy()
    issue = events.column("t_issue_ns").to_numpy().copy()
    end = events.column("t_end_ns").to_numpy().copy()
    changed = False
    for key, meta in manifest.get("ranks", {}).items():
        clock = meta.get("clock") or {}
        if "offset_ns" not in clock:
            continue
        offset = int(clock["offset_ns"])
        drift = float(clock.get("drift", 0.0))
        t0 = int(clock.get("t_ref_ns", 0))
        mask = ranks == int(key)
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
