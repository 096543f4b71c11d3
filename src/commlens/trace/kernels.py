"""A device run's kernels and CPU syncs, per rank: ``kernels-NNNNN.parquet``.

A run imported from GPU profiler traces (time semantics ``device``) keeps, beside
its communication events, what a replay of its streams needs and the events do
not hold: every kernel of the rank's device (compute and communication) with its
stream, its interval and the CPU launch that queued it, and the CPU's blocking
syncs (``cudaStreamSynchronize`` and the like). One row each (:data:`KERNELS_SCHEMA`);
times are nanoseconds on the rank's clock, like the events'. A run without
these files (captured on a host, or imported before they existed) has none.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commlens.errors import RunFormatError
from commlens.safefile import open_own
from commlens.trace.align import Clock, align_numpy, moves
from commlens.trace.layout import kernels_path
from commlens.trace.schema import MAX_TIME_NS

COMPUTE = "compute"
COMM = "comm"
SYNC = "sync"
KINDS = (COMPUTE, COMM, SYNC)
KERNELS_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # compute, comm (an op's kernel) or sync (a CPU sync)
        ("stream", pa.int32()),  # the kernel's stream; null for a sync
        ("t_start_ns", pa.int64()),  # kernel start; a sync's call
        ("t_end_ns", pa.int64()),  # kernel end; a sync's return
        ("t_launch_ns", pa.int64()),  # the CPU launch call's start; null when not found
        ("tid", pa.int64()),  # the CPU thread of the launch or sync; null when not found
        ("seq", pa.int64()),  # a comm kernel's op (its seq in the rank's events); else null
    ],
    metadata={b"commlens.kernels": b"1"},
)
TIME_COLUMNS = ("t_start_ns", "t_end_ns", "t_launch_ns")


def write_kernels(run_dir: Path, rank: int, table: pa.Table) -> None:
    """``rank``'s kernels file in ``run_dir`` (a directory being built)."""
    path = kernels_path(run_dir, rank)
    sink = os.fdopen(open_own(path), "wb")
    with sink:
        pq.write_table(table.cast(KERNELS_SCHEMA), sink, compression="zstd")


def has_kernels(run_dir: Path, ranks: list[int]) -> bool:
    """True when every rank of ``ranks`` has an entry named as its kernels file (one that
    is not a regular file is refused when read, not passed over)."""
    paths = [kernels_path(run_dir, r) for r in ranks]
    return bool(ranks) and all(p.is_symlink() or p.exists() for p in paths)


def read_kernels(run_dir: Path, rank: int, clock: Clock | None = None) -> pa.Table:
    """``rank``'s kernels (times moved by ``clock`` onto rank 0's); a one-line
    :class:`RunFormatError` for a file that is not one."""
    path = kernels_path(run_dir, rank)
    if path.is_symlink() or not path.is_file():
        raise RunFormatError(f"{path}: not a regular file (a link, a folder or a device)")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise RunFormatError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    if table.schema.remove_metadata() != KERNELS_SCHEMA.remove_metadata():
        raise RunFormatError(f"{path}: not a commlens kernels file")
    for name in TIME_COLUMNS:
        pair = pc.min_max(table.column(name))
        lo, hi = pair["min"].as_py(), pair["max"].as_py()
        if lo is not None and (lo < 0 or hi > MAX_TIME_NS):
            raise RunFormatError(f"{path}: {name} out of bounds")
    bad = pc.any(pc.invert(pc.is_in(table.column("kind"), pa.array(KINDS)))).as_py()
    if bad:
        raise RunFormatError(f"{path}: a row of an unknown kind")
    if clock is None or not moves(clock):
        return table
    for name in TIME_COLUMNS:
        col = table.column(name)
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
        t = align_numpy(pc.fill_null(col, 0).to_numpy(), clock)
        table = table.set_column(
            table.schema.get_field_index(name), name, pa.array(t, pa.int64(), mask=~valid)
        )
    return table


def empty_kernels() -> pa.Table:
    return KERNELS_SCHEMA.empty_table()


def as_numpy(table: pa.Table, name: str, null: int = -1) -> np.ndarray:
    """A column as int64 numbers, ``null`` for nulls."""
    return pc.fill_null(table.column(name), null).to_numpy().astype(np.int64)
