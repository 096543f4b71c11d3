"""The files of a run directory, checked without reading the events.

One set of rules for every reader (:func:`commlens.load_run`, which loads
everything, and the analyses' lazy views): a foreign or corrupt file is a
one-line :class:`RunFormatError` naming it; a truncated or missing rank file
is a warning and the rank is left out; a rank that died before joining its
parts is read from its flushed parts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from commlens.errors import RunFormatError
from commlens.trace.manifest import FORMAT_NAME, MANIFEST, collect_rank_meta, read_json
from commlens.trace.packed import read_packed_parts
from commlens.trace.schema import EVENT_SCHEMA, RANK_KEY, SCHEMA_KEY

_RANK_FILE = re.compile(r"^rank-(\d{5,})\.parquet$")
_PARTS_DIR = re.compile(r"^\.rank-(\d{5,})\.parts$")


def scan(run_dir: Path) -> tuple[dict[str, Any], dict[int, Path], list[int]]:
    if not run_dir.is_dir():
        raise RunFormatError(f"{run_dir}: no such run directory")
    manifest_path = run_dir / MANIFEST
    manifest: dict[str, Any] = {}
    if manifest_path.exists():
        manifest = read_json(manifest_path)
        if manifest.get("format") != FORMAT_NAME:
            raise RunFormatError(f"{manifest_path}: not a commlens run manifest")
    manifest["ranks"] = {**manifest.get("ranks", {}), **collect_rank_meta(run_dir)}
    files: dict[int, Path] = {}
    parts: list[int] = []
    for entry in sorted(run_dir.iterdir()):
        if match := _RANK_FILE.match(entry.name):
            files[int(match.group(1))] = entry
        elif (match := _PARTS_DIR.match(entry.name)) and entry.is_dir():
            parts.append(int(match.group(1)))
    parts = sorted(r for r in parts if r not in files)
    if not manifest_path.exists() and not files and not parts and not manifest["ranks"]:
        raise RunFormatError(f"{run_dir}: not a commlens run (no run.json or rank-*.parquet)")
    return manifest, files, parts


def check_rank_file(file: Path, rank: int, warnings: list[str]) -> bool:
    """True when ``file`` is a readable commlens events file of ``rank``."""
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
        return False
    try:
        schema = pq.ParquetFile(file).schema_arrow
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
    return True


def read_parts(part_dir: Path) -> pa.Table:
    """The events a rank wrote before it died, from its parts directory."""
    match = _PARTS_DIR.match(part_dir.name)
    rank = int(match.group(1)) if match else -1
    tables = read_packed_parts(part_dir, rank, EVENT_SCHEMA)
    return pa.concat_tables(tables) if tables else EVENT_SCHEMA.empty_table()


def expected_ranks(manifest: dict[str, Any]) -> set[int]:
    size = manifest.get("world_size")
    ranks = {int(k) for k in manifest.get("ranks", {})}
    return ranks | set(range(size)) if isinstance(size, int) else ranks


def ranks_without_events(manifest: dict[str, Any]) -> set[int]:
    return {
        int(k)
        for k, meta in manifest.get("ranks", {}).items()
        if meta.get("status") == "ok" and int(meta.get("events", 0)) == 0
    }


def clocks(manifest: dict[str, Any]) -> dict[int, tuple[int, float, int]]:
    out = {}
    for key, meta in manifest.get("ranks", {}).items():
        clock = meta.get("clock") or {}
        if "offset_ns" in clock:
            out[int(key)] = (
                int(clock["offset_ns"]),
                float(clock.get("drift", 0.0)),
                int(clock.get("t_ref_ns", 0)),
            )
    return out


def clock_table(manifest: dict[str, Any]) -> pa.Table:
    rows: dict[str, list[Any]] = {"rank": [], "offset_ns": [], "drift": [], "t_ref_ns": []}
    for key, meta in manifest.get("ranks", {}).items():
        clock = meta.get("clock") or {}
        if "offset_ns" not in clock:
            continue
        rows["rank"].append(int(key))
        rows["offset_ns"].append(int(clock["offset_ns"]))
        rows["drift"].append(float(clock.get("drift", 0.0)))
        rows["t_ref_ns"].append(int(clock.get("t_ref_ns", 0)))
    return pa.table(
        {
            "rank": pa.array(rows["rank"], pa.int32()),
            "offset_ns": pa.array(rows["offset_ns"], pa.int64()),
            "drift": pa.array(rows["drift"], pa.float64()),
            "t_ref_ns": pa.array(rows["t_ref_ns"], pa.int64()),
        }
    )
