"""The compact event record: what the capture stores per call, and how it becomes rows.

An event's constant part (op, group, role, dtype, phase, module...) is one
interned *site*; the rest is twelve integers packed little-endian into 96
bytes (:data:`PACKED_EVENT`). A rank's unfinished run keeps them as written:
``sites.jsonl`` (one site per line, in id order) and ``part-NNNNNN.bin``
files of packed events. :func:`expand` turns them into event rows.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.trace.schema import EVENT_COLUMNS

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
PACKED_EVENT = struct.Struct(f"<{len(COMPACT_FIELDS)}q")
NO_PEER = -1  # ``peer`` of an event that has none
SITES_FILE = "sites.jsonl"
PART_GLOB = "part-*.bin"


def part_name(index: int) -> str:
    return f"part-{index:06d}.bin"


def site_line(site: Sequence[Any]) -> str:
    return json.dumps(list(site), separators=(",", ":")) + "\n"


def read_sites(path: Path) -> list[tuple[Any, ...]]:
    """Sites of a parts directory; a last line cut short by a kill is left out."""
    sites: list[tuple[Any, ...]] = []
    if not path.exists():
        return sites
    for line in path.read_text().splitlines():
        try:
            values = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(values, list) or len(values) != len(SITE_FIELDS):
            break
        sites.append(tuple(values))
    return sites


def expand(
    packed: bytes | bytearray, sites: Sequence[Sequence[Any]], rank: int, schema: pa.Schema
) -> pa.Table:
    """Packed events to a table of ``schema`` (EVENT_COLUMNS): sites expand by one take().

    A trailing partial record and events whose site is unknown are dropped.
    """
    usable = len(packed) - len(packed) % PACKED_EVENT.size
    rows = np.frombuffer(packed, dtype="<i8", count=usable // 8).reshape(-1, len(COMPACT_FIELDS))
    site_ids = rows[:, 0]
    known = (site_ids >= 0) & (site_ids < len(sites))
    if not known.all():
        rows = rows[known]
    columns = {name: rows[:, i] for i, name in enumerate(COMPACT_FIELDS)}
    take = pa.array(columns.pop("site").astype(np.int32))
    arrays: dict[str, Any] = {"rank": pa.array(np.full(len(rows), rank, np.int32))}
    per_field = list(zip(*sites, strict=True)) if sites else [() for _ in SITE_FIELDS]
    for name, per_site in zip(SITE_FIELDS, per_field, strict=True):
        arrays[name] = pa.array(per_site, type=schema.field(name).type).take(take)
    peer = columns.pop("peer")
    arrays["peer"] = pa.array(peer.astype(np.int32), mask=peer == NO_PEER)
    arrays["is_async"] = pa.array(columns.pop("is_async") != 0)
    for name, values in columns.items():
        arrays[name] = pa.array(values.astype(schema.field(name).type.to_pandas_dtype()))
    elapsed = columns["t_end_ns"] - columns["t_issue_ns"]
    arrays["duration_s"] = pa.array(elapsed / 1e9)
    return pa.table([arrays[name] for name in EVENT_COLUMNS], schema=schema)


def read_packed_parts(part_dir: Path, rank: int, schema: pa.Schema) -> list[pa.Table]:
    """Every part of an unfinished rank, in order, as tables."""
    sites = read_sites(part_dir / SITES_FILE)
    return [
        expand(part.read_bytes(), sites, rank, schema) for part in sorted(part_dir.glob(PART_GLOB))
    ]
