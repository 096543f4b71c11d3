"""The files of a run directory, checked without reading the events.

The rules of the reader (:mod:`commlens.trace.reader`), applied once by
:func:`open_files` when a run is opened:

- fatal, a one-line :class:`RunFormatError` naming the file: a missing or
  foreign directory, a bad ``run.json`` (see
  :func:`commlens.trace.manifest.read_manifest`), a rank file that is not
  Parquet, has a foreign schema or holds another rank;
- partial, a warning and the rank left out: a missing or truncated rank file
  (even one of 0 bytes), a damaged one (corrupt footer or pages, a column of
  the wrong type, values out of bounds), one that is not a regular file (a
  directory, a symlink loop), a rank number out of bounds;
- a rank that died before joining its parts is read from its flushed parts.

Damage inside a file's pages shows only when they are read; the lazy view
then leaves the rank out the same way (``RunView.drop_rank``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commlens.errors import RunFormatError
from commlens.safefile import open_regular
from commlens.trace.layout import (
    MANIFEST,
    PARTS_DIR,
    RANK_EVENTS,
    RANK_EVENTS_GLOB,
    rank_events_name,
)
from commlens.trace.manifest import Manifest, bounds_text, read_manifest
from commlens.trace.packed import read_packed_parts
from commlens.trace.schema import (
    COLUMN_BOUNDS,
    DEVICE_EVENT_SCHEMA,
    EVENT_SCHEMA,
    MAX_RANK_BYTES,
    MAX_WORLD,
    RANK_KEY,
    SCHEMA_KEY,
    SUMMED_COLUMNS,
)

_MIN_PARQUET = 12  # magic, footer length, magic: a smaller file cannot hold a footer


@dataclass
class RunFiles:
    """What :func:`open_files` found: the checked manifest and the usable files."""

    manifest: Manifest
    files: dict[int, Path] = field(default_factory=dict)
    """rank -> its events file, checked (footer, schema, bounds)."""
    parts: dict[int, pa.Table] = field(default_factory=dict)
    """rank -> the events of a rank that did not finish, from its flushed parts."""
    skipped: set[int] = field(default_factory=set)
    """Ranks with a file that could not be used (each has a warning)."""
    warnings: list[str] = field(default_factory=list)

    def missing(self, with_events: set[int]) -> list[int]:
        """Ranks expected but without events (and not known to have none); warns once
        about those without any file."""
        expected = set(self.manifest.ranks) | set(self.files) | set(self.parts) | self.skipped
        if self.manifest.world_size is not None:
            expected |= set(range(self.manifest.world_size))
        empty = {
            r for r, info in self.manifest.ranks.items() if info.status == "ok" and info.events == 0
        }
        missing = sorted(expected - with_events - empty)
        absent = [r for r in missing if r not in self.files and r not in self.skipped]
        absent = [r for r in absent if r not in self.parts]
        self.warnings += [
            f"rank {a}: no events file ({rank_events_name(a)} is missing)"
            if a == b
            else f"ranks {a}..{b}: no events files ({b - a + 1} ranks)"
            for a, b in rank_ranges(absent)
        ]
        return missing


def rank_ranges(ranks: list[int]) -> list[tuple[int, int]]:
    """Sorted ranks as (first, last) runs of consecutive numbers."""
    out: list[tuple[int, int]] = []
    for r in ranks:
        if out and r == out[-1][1] + 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def format_ranks(ranks: Sequence[int] | None) -> str:
    """Ranks for a reader, each once, in order, runs as ``a-b``: [0, 1, 2, 3, 6] -> "0-3,6"."""
    return ",".join(
        str(a) if a == b else f"{a}-{b}"
        for a, b in rank_ranges(sorted({int(r) for r in ranks or ()}))
    )


def one_line(exc: BaseException, limit: int = 160) -> str:
    """An exception's message on one line, cut to ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def open_files(run_dir: Path) -> RunFiles:
    """Check the run directory's manifest and every rank file (footers only)."""
    if not run_dir.is_dir():
        raise RunFormatError(f"{run_dir}: no such run directory")
    run = RunFiles(read_manifest(run_dir))
    run.warnings += run.manifest.warnings
    candidates: dict[int, Path] = {}
    part_dirs: dict[int, Path] = {}
    for entry in sorted(run_dir.iterdir()):
        if match := RANK_EVENTS.match(entry.name):
            rank = int(match.group(1))
            if rank >= MAX_WORLD:
                run.warnings.append(
                    f"{entry.name}: rank out of bounds (0..{MAX_WORLD - 1}): skipped"
                )
            elif not entry.is_file():
                kind = "a directory" if entry.is_dir() else "a broken link or special file"
                run.warnings.append(f"{entry.name} is {kind}, not a file: rank {rank} skipped")
                run.skipped.add(rank)
            else:
                candidates[rank] = entry
        elif (match := PARTS_DIR.match(entry.name)) and entry.is_dir():
            if int(match.group(1)) < MAX_WORLD:
                part_dirs[int(match.group(1))] = entry
    if not run.manifest.found and not candidates and not part_dirs and not run.manifest.ranks:
        if not run.skipped:
            raise RunFormatError(
                f"{run_dir}: not a commlens run (no {MANIFEST} or {RANK_EVENTS_GLOB})"
            )
    for rank, file in candidates.items():
        if check_rank_file(file, rank, run.warnings):
            run.files[rank] = file
        else:
            run.skipped.add(rank)
    for rank, part_dir in part_dirs.items():
        if rank in candidates:
            continue
        try:
            table = read_parts(part_dir)
        except Exception as exc:  # a damaged parts directory costs that rank only
            run.warnings.append(
                f"{part_dir.name} is damaged ({one_line(exc)}): rank {rank} skipped"
            )
            run.skipped.add(rank)
            continue
        problem = out_of_bounds(table)
        if problem:
            run.warnings.append(f"{part_dir.name}: {problem}: rank {rank} skipped")
            run.skipped.add(rank)
            continue
        run.warnings.append(
            f"rank {rank} did not finish: read {table.num_rows} events from its flushed parts"
        )
        run.parts[rank] = table
    return run


def check_rank_file(file: Path, rank: int, warnings: list[str]) -> bool:
    """True when ``file`` is a readable commlens events file of ``rank``; False (with a
    warning) when it is truncated or damaged; a :class:`RunFormatError` when foreign."""
    try:
        with os.fdopen(open_regular(file), "rb") as fh:  # never a FIFO or a device
            head = fh.read(4)
            size = fh.seek(0, 2)
            fh.seek(max(0, size - 4))
            tail = fh.read(4)
    except OSError as exc:
        warnings.append(f"{file.name} is unreadable ({exc.strerror}): rank {rank} skipped")
        return False
    if not b"PAR1".startswith(head):
        raise RunFormatError(f"{file}: not a Parquet file, so not a commlens events file")
    if size < _MIN_PARQUET or tail != b"PAR1":
        warnings.append(f"{file.name} is truncated ({size} bytes, no footer): rank {rank} skipped")
        return False
    try:
        pf = pq.ParquetFile(file)
        schema = pf.schema_arrow
    except (OSError, pa.ArrowException, ValueError) as exc:  # a corrupt footer
        warnings.append(f"{file.name} is damaged ({one_line(exc)}): rank {rank} skipped")
        return False
    metadata = schema.metadata or {}
    if SCHEMA_KEY not in metadata:
        raise RunFormatError(f"{file}: not a commlens events file (foreign Parquet schema)")
    if metadata.get(RANK_KEY) not in (None, str(rank).encode()):
        held = metadata[RANK_KEY].decode(errors="replace")[:20]
        raise RunFormatError(f"{file}: holds rank {held}, not {rank}")
    problem = schema_problem(schema)
    if problem is None:
        try:
            problem = _bounds_from_statistics(pf, file, rank)
        except (OSError, pa.ArrowException, ValueError) as exc:  # damaged statistics
            problem = f"unreadable statistics ({one_line(exc)})"
    if problem:
        warnings.append(f"{file.name}: {problem}: rank {rank} skipped")
        return False
    return True


def schema_problem(schema: pa.Schema) -> str | None:
    """What keeps ``schema`` from being read as the events schema, or None."""
    missing = [name for name in EVENT_SCHEMA.names if name not in schema.names]
    if missing:
        return f"missing columns {', '.join(missing)}"
    for want in DEVICE_EVENT_SCHEMA:
        if want.name not in schema.names:  # a device column (optional)
            continue
        got = schema.field(want.name).type
        if got != want.type and not (_is_string(got) and _is_string(want.type)):
            return f"column {want.name} is {got}, not {want.type}"
    return None


def _is_string(typ: pa.DataType) -> bool:
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ))


def _bounds_from_statistics(pf: pq.ParquetFile, file: Path, rank: int) -> str | None:
    """Values out of :data:`COLUMN_BOUNDS` (or a rank column naming another rank),
    from the row groups' statistics; a column chunk without them is read."""
    meta = pf.metadata
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    bounds = {**COLUMN_BOUNDS, "rank": (rank, rank)}
    largest: dict[str, int] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        for name, (lo, hi) in bounds.items():
            if name not in index:  # a device column of a file without them
                continue
            stats = group.column(index[name]).statistics
            if stats is not None and stats.has_min_max:
                low, high = stats.min, stats.max
            elif stats is not None and stats.null_count == group.num_rows:
                continue
            else:
                pair = pc.min_max(pf.read_row_group(g, columns=[name]).column(name))
                low, high = pair["min"].as_py(), pair["max"].as_py()
                if low is None:
                    continue
            if not (isinstance(low, int) and isinstance(high, int)) or low < lo or high > hi:
                if name == "rank":
                    raise RunFormatError(f"{file}: holds rank {low}, not {rank}")
                return f"{name} values {low}..{high} out of bounds {bounds_text(lo, hi)}"
            largest[name] = max(largest.get(name, 0), high)
    return _too_much(largest, meta.num_rows)


def _too_much(largest: dict[str, int], rows: int) -> str | None:
    for name in SUMMED_COLUMNS:
        if largest.get(name, 0) * rows > MAX_RANK_BYTES:
            return f"{name} up to {largest[name]} in {rows} events: totals out of bounds"
    return None


def out_of_bounds(table: pa.Table) -> str | None:
    """Like the statistics check, over a table in memory."""
    for name, (lo, hi) in COLUMN_BOUNDS.items():
        if name not in table.column_names:
            continue
        pair = pc.min_max(table.column(name))
        low, high = pair["min"].as_py(), pair["max"].as_py()
        if low is not None and (low < lo or high > hi):
            return f"{name} values {low}..{high} out of bounds {bounds_text(lo, hi)}"
    largest = {name: pc.max(table.column(name)).as_py() or 0 for name in SUMMED_COLUMNS}
    return _too_much(largest, table.num_rows)


def read_parts(part_dir: Path) -> pa.Table:
    """The events a rank wrote before it died, from its parts directory."""
    match = PARTS_DIR.match(part_dir.name)
    rank = int(match.group(1)) if match else -1
    tables = read_packed_parts(part_dir, rank, EVENT_SCHEMA)
    return pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()


def ranks_table(manifest: Manifest, with_events: set[int], missing: list[int]) -> pa.Table:
    """``rank, status, host, events`` of every rank known to the run."""
    gone = set(missing)
    keys = sorted(set(manifest.ranks) | with_events | gone)
    infos = [manifest.ranks.get(r) for r in keys]
    return pa.table(
        {
            "rank": pa.array(keys, pa.int32()),
            "status": pa.array(
                [
                    "missing" if r in gone else (i.status if i else "unknown")
                    for r, i in zip(keys, infos, strict=True)
                ],
                pa.string(),
            ),
            "host": pa.array([i.host if i else "" for i in infos], pa.string()),
            "events": pa.array(
                [(i.events or 0) if i else 0 for i in infos],
                pa.int64(),
            ),
        }
    )
