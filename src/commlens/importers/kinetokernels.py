"""One rank's kernels and CPU syncs from its profiler trace, for the run's kernels file.

:func:`kernel_table` lists, for a rank whose ops ran on a device, every kernel of
that device (compute kernels from the scan's compact arrays, column by column,
the comm kernels joined to their ops) with its stream and the CPU launch that
queued it (by the launch's correlation id), and the CPU's ``cuda*Synchronize``
calls: a table of :data:`commlens.trace.kernels.KERNELS_SCHEMA`, whose ``seq``
holds, for an op's kernel, the op's index in the rank's ops (the writer turns
it into the op's seq).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.importers.kinetoscan import FileScan, Kernel
from commlens.trace.kernels import COMM, COMPUTE, KERNELS_SCHEMA, SYNC


def ns_array(base: int, us: np.ndarray) -> np.ndarray:
    """Microsecond times as nanoseconds after ``base``, as the importer's scalar
    conversion makes them (whole µs × 1000 plus the rounded fraction)."""
    whole = np.trunc(us)
    return base + whole.astype(np.int64) * 1000 + np.round((us - whole) * 1000).astype(np.int64)


def _part(
    kind: str,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    launch: np.ndarray,
    tid: np.ndarray,
    seq: np.ndarray,
) -> pa.Table:
    """Rows of one kind; -1 stands for null in ``stream``, ``launch``, ``tid``, ``seq``."""
    n = start.size
    columns = [
        pa.array([kind], pa.string()).take(pa.array(np.zeros(n, np.int64))),
        pa.array(stream.astype(np.int32), pa.int32(), mask=stream < 0),
        pa.array(start, pa.int64()),
        pa.array(end, pa.int64()),
        pa.array(launch, pa.int64(), mask=launch < 0),
        pa.array(tid, pa.int64(), mask=tid < 0),
        pa.array(seq, pa.int64(), mask=seq < 0),
    ]
    return pa.Table.from_arrays(columns, schema=KERNELS_SCHEMA)


def kernel_table(
    s: FileScan, kernels_of: dict[int, list[Kernel]], base: int, to_ns: Callable[[float], int]
) -> pa.Table | None:
    """The rank's kernels file (see the module docstring); None without comm kernels."""
    devices = {k.device for ks in kernels_of.values() for k in ks}
    if not devices:
        return None
    corr, tids, ts = s.all_launches()

    def launches(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.minimum(np.searchsorted(corr, c), max(corr.size - 1, 0))
        found = (c >= 0) & (corr.size > 0) & (corr[i] == c) if corr.size else c < -1
        at = np.where(found, ns_array(base, ts[i]) if corr.size else 0, -1)
        return at.astype(np.int64), np.where(found, tids[i] if corr.size else 0, -1)

    parts = []
    for device in sorted(devices):
        pair, ids = s.compute.get(device), s.compute_ids.get(device)
        if pair is None or ids is None or not len(pair[0]):
            continue
        starts = np.frombuffer(pair[0], dtype=np.float64)
        ends = np.frombuffer(pair[1], dtype=np.float64)
        stream = np.frombuffer(ids[0], dtype=np.int64)
        at, tid = launches(np.frombuffer(ids[1], dtype=np.int64))
        none = np.full(starts.size, -1, np.int64)
        parts.append(
            _part(COMPUTE, stream, ns_array(base, starts), ns_array(base, ends), at, tid, none)
        )
    comm: list[tuple[int, int, int, int, int]] = []  # stream, start, end, correlation, op
    seen: set[int] = set()
    for idx, ks in sorted(kernels_of.items()):
        for k in ks:
            if id(k) in seen:  # a kernel several ops share: named by the first
                continue
            seen.add(id(k))
            stream = k.args.get("stream", k.tid)
            on = stream if isinstance(stream, int) and stream >= 0 else -1
            c = k.args.get("correlation", -1)
            comm.append((on, to_ns(k.ts), to_ns(k.end), c if isinstance(c, int) else -1, idx))
    if comm:
        cols = np.array(comm, dtype=np.int64).reshape(-1, 5)
        at, tid = launches(cols[:, 3])
        parts.append(_part(COMM, cols[:, 0], cols[:, 1], cols[:, 2], at, tid, cols[:, 4]))
    if s.syncs:
        sync = np.array(s.syncs, dtype=np.float64).reshape(-1, 3)
        none = np.full(len(sync), -1, np.int64)
        call = ns_array(base, sync[:, 1])
        ret = ns_array(base, sync[:, 1] + sync[:, 2])
        parts.append(_part(SYNC, none, call, ret, none, sync[:, 0].astype(np.int64), none))
    table = pa.concat_tables(parts)
    order = pc.sort_indices(table, [("t_start_ns", "ascending"), ("t_end_ns", "ascending")])
    return table.take(order)
