"""The compact event record: what the capture stores per call, and how it becomes rows.

An event's *kind* is what it shares with every event like it (op, api,
group, role, dtype, phase, module: :data:`KIND_FIELDS`), interned once per
rank as a small integer; an event is that integer and eleven more (sizes,
peer, times, step), packed little-endian into 96 bytes
(:data:`PACKED_EVENT`). A rank's unfinished run keeps them as written:
:data:`SITES_FILE` (the kinds, one per line, in id order; the file keeps the
name it has had since format 1) and ``part-NNNNNN.bin`` files of packed
events. :func:`expand` turns them into event rows.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.safefile import DATA_LIMIT, read_bytes, read_text
from commlens.trace.schema import DEVICE_COLUMN_NAMES

KIND_FIELDS = ("op", "api", "pg_name", "pg_ranks", "group_size", "role", "dtype", "phase", "module")
COMPACT_FIELDS = (
    "kind",
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
PACKED_DEVICE_EVENT = struct.Struct(f"<{len(COMPACT_FIELDS) + len(DEVICE_COLUMN_NAMES)}q")
"""An event of a device-time run: :data:`PACKED_EVENT`'s fields, then
:data:`~commlens.trace.schema.DEVICE_COLUMN_NAMES` (:data:`NO_VALUE` for null)."""
NO_PEER = -1  # ``peer`` of an event that has none
NO_VALUE = -1  # a device column's null
SITES_FILE = "sites.jsonl"
PART_GLOB = "part-*.bin"


def part_name(index: int) -> str:
    return f"part-{index:06d}.bin"


def kind_line(kind: Sequence[Any]) -> str:
    return json.dumps(list(kind), separators=(",", ":")) + "\n"


def read_kinds(path: Path) -> list[tuple[Any, ...]]:
    """Event kinds of a parts directory; a last line cut short by a kill is left out."""
    kinds: list[tuple[Any, ...]] = []
    if not path.exists():
        return kinds
    for line in read_text(path, limit=DATA_LIMIT, follow=False).splitlines():
        try:
            values = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(values, list) or len(values) != len(KIND_FIELDS):
            break
        kinds.append(tuple(values))
    return kinds


def expand(
    packed: bytes | bytearray, kinds: Sequence[Sequence[Any]], rank: int, schema: pa.Schema
) -> pa.Table:
    """Packed events to a table of ``schema`` (EVENT_COLUMNS, and DEVICE_COLUMN_NAMES
    when it has them: then each record is a :data:`PACKED_DEVICE_EVENT`): kinds expand
    by one take(). A trailing partial record and events whose kind is unknown are dropped.
    """
    device = [name for name in DEVICE_COLUMN_NAMES if name in schema.names]
    width = len(COMPACT_FIELDS) + len(device)
    usable = len(packed) - len(packed) % (8 * width)
    rows = np.frombuffer(packed, dtype="<i8", count=usable // 8).reshape(-1, width)
    kind_ids = rows[:, 0]
    known = (kind_ids >= 0) & (kind_ids < len(kinds))
    if not known.all():
        rows = rows[known]
    columns = {name: rows[:, i] for i, name in enumerate(COMPACT_FIELDS)}
    take = pa.array(columns.pop("kind").astype(np.int32))
    arrays: dict[str, Any] = {"rank": pa.array(np.full(len(rows), rank, np.int32))}
    for i, name in enumerate(device, len(COMPACT_FIELDS)):
        values = rows[:, i]
        typ = schema.field(name).type
        arrays[name] = pa.array(values.astype(typ.to_pandas_dtype()), typ, mask=values == NO_VALUE)
    per_field = list(zip(*kinds, strict=True)) if kinds else [() for _ in KIND_FIELDS]
    for name, per_kind in zip(KIND_FIELDS, per_field, strict=True):
        arrays[name] = pa.array(per_kind, type=schema.field(name).type).take(take)
    peer = columns.pop("peer")
    arrays["peer"] = pa.array(peer.astype(np.int32), mask=peer == NO_PEER)
    arrays["is_async"] = pa.array(columns.pop("is_async") != 0)
    for name, values in columns.items():
        arrays[name] = pa.array(values.astype(schema.field(name).type.to_pandas_dtype()))
    elapsed = columns["t_end_ns"] - columns["t_issue_ns"]
    arrays["duration_s"] = pa.array(elapsed / 1e9)
    return pa.table([arrays[name] for name in schema.names], schema=schema)


def read_packed_parts(part_dir: Path, rank: int, schema: pa.Schema) -> list[pa.Table]:
    """Every part of an unfinished rank, in order, as tables."""
    kinds = read_kinds(part_dir / SITES_FILE)
    return [
        expand(read_part(part), kinds, rank, schema) for part in sorted(part_dir.glob(PART_GLOB))
    ]


def read_part(path: Path) -> bytes:
    """One flushed part's packed events (a regular file, never through a symlink)."""
    return read_bytes(path, limit=DATA_LIMIT, follow=False)
