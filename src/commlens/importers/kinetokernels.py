"""One rank's kernels and CPU syncs from its profiler trace, for the run's kernels file.

:func:`kernel_rows` lists, for a rank whose ops ran on a device, every kernel of
that device (compute kernels from the scan's compact arrays, the comm kernels
joined to their ops) with its stream and the CPU launch that queued it (by the
launch's correlation id), and the CPU's ``cuda*Synchronize`` calls: the rows of
:data:`commlens.trace.kernels.KERNELS_SCHEMA`, an op's kernel naming the op by
its index in the rank's ops (the writer turns it into the op's seq).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from commlens.importers.kinetoscan import FileScan, Kernel
from commlens.trace.kernels import COMM, COMPUTE, SYNC

KernelRow = tuple[str, int | None, int, int, int | None, int | None, int | None]
"""(kind, stream, start, end, launch, tid, op index) in ns."""


def kernel_rows(
    s: FileScan, kernels_of: dict[int, list[Kernel]], to_ns: Callable[[float], int]
) -> list[KernelRow]:
    """The rank's kernel rows (see the module docstring); empty without comm kernels."""
    devices = {k.device for ks in kernels_of.values() for k in ks}
    if not devices:
        return []
    corr, tid, ts = s.all_launches()

    def launch(c: int) -> tuple[int | None, int | None]:
        i = int(np.searchsorted(corr, c))
        if c < 0 or i >= corr.size or corr[i] != c:
            return None, None
        return to_ns(float(ts[i])), int(tid[i])

    rows: list[KernelRow] = []
    for device in sorted(devices):
        pair, ids = s.compute.get(device), s.compute_ids.get(device)
        if pair is None or ids is None:
            continue
        starts = np.frombuffer(pair[0], dtype=np.float64)
        ends = np.frombuffer(pair[1], dtype=np.float64)
        streams = np.frombuffer(ids[0], dtype=np.int64)
        corrs = np.frombuffer(ids[1], dtype=np.int64)
        for a, b, st, c in zip(starts, ends, streams, corrs, strict=True):
            at, t = launch(int(c))
            rows.append((COMPUTE, int(st), to_ns(float(a)), to_ns(float(b)), at, t, None))
    seen: set[int] = set()
    for idx, ks in sorted(kernels_of.items()):
        for k in ks:
            if id(k) in seen:  # a kernel several ops share: named by the first
                continue
            seen.add(id(k))
            at, t = launch(int(k.args.get("correlation", -1)))
            stream = k.args.get("stream", k.tid)
            on = stream if isinstance(stream, int) and stream >= 0 else None
            rows.append((COMM, on, to_ns(k.ts), to_ns(k.end), at, t, idx))
    for t, a, d in s.syncs:
        rows.append((SYNC, None, to_ns(a), to_ns(a + d), None, int(t), None))
    rows.sort(key=lambda r: (r[2], r[3]))
    return rows
