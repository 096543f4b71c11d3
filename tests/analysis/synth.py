"""Synthetic runs with exactly known times: :mod:`commlens.trace.synthetic`'s writer,
plus a rank's parts left as a rank that died mid-run leaves them."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa

from commlens.trace.schema import EVENT_COLUMNS
from commlens.trace.synthetic import T0_NS, ev, write_run
from commlens.trace.writer import EventWriter, parts_dir

__all__ = ["T0_NS", "ev", "write_parts", "write_run"]


def write_parts(part_dir: Path, table: pa.Table, *, per_part: int = 7) -> None:
    """Leave ``table`` as a rank that died mid-run leaves its events: the writer's parts.

    The real writer writes them (into a scratch directory, ``per_part`` events
    a part); they are copied before it could join them into a rank file.
    """
    rank = int(part_dir.name.removeprefix(".rank-").removesuffix(".parts"))
    with tempfile.TemporaryDirectory() as scratch:
        writer = EventWriter(Path(scratch), rank, flush_events=per_part, flush_seconds=3600)
        for row in table.to_pylist():
            writer.append(tuple(row[c] for c in EVENT_COLUMNS))
        writer.flush()
        shutil.copytree(parts_dir(Path(scratch), rank), part_dir)
        writer.close()
