"""Columns of the per-rank events file and the canonical op names.

Every event is one communication call as a rank saw it. Times are integer
nanoseconds on the rank's wall clock as written; the reader shifts them onto
rank 0's clock with the offsets in the manifest.
"""

from __future__ import annotations

import pyarrow as pa

from commlens.optable import OPS as OPS  # re-exported: canonical op names
from commlens.optable import PHASES as PHASES

FORMAT_VERSION = 2
"""1: the event columns below; 2: events files may also hold :data:`DEVICE_COLUMNS`
(a version-1 file reads as one whose device columns are all null)."""
SCHEMA_KEY = b"commlens.format"
RANK_KEY = b"commlens.rank"
MAX_WORLD = 1_000_000
"""Largest world size (and rank + 1) a reader accepts."""
MAX_TIME_NS = 1 << 62
"""Times are nanoseconds in 0..MAX_TIME_NS (to the year 2116): far from the ends of
int64, so that clock alignment and differences of times never overflow."""

# (name, type, meaning) — the one place that defines an event.
_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("rank", pa.int32(), "global rank that issued the call"),
    ("seq", pa.int64(), "per-rank sequence number, from 0"),
    ("op", pa.string(), "canonical op name (see OPS)"),
    ("api", pa.string(), "capture path that saw it: python, batch_p2p, functional, c10d"),
    ("pg_name", pa.string(), "process group name"),
    ("pg_ranks", pa.list_(pa.int32()), "global ranks of the process group"),
    ("group_size", pa.int32(), "size of the op's own process group"),
    ("role", pa.string(), "dp, tp, pp, ep, cp or empty when unknown"),
    ("dtype", pa.string(), "element type, e.g. float32; 'object' for object collectives"),
    ("count", pa.int64(), "elements in the rank's input"),
    ("bytes_in", pa.int64(), "bytes the rank contributes"),
    ("bytes_out", pa.int64(), "bytes the rank receives into its output"),
    ("size_bytes", pa.int64(), "nccl-tests message size S"),
    ("peer", pa.int32(), "global peer rank (p2p) or root (rooted collectives); null otherwise"),
    ("is_async", pa.bool_(), "issued with async_op=True (or as a batched/hook op)"),
    ("t_issue_ns", pa.int64(), "when the call was issued"),
    ("t_end_ns", pa.int64(), "when the op completed"),
    ("t_wait_ns", pa.int64(), "time the caller was blocked waiting for it"),
    ("duration_s", pa.float64(), "t_end - t_issue in seconds"),
    # A step runs from its first module forward to the next step's first forward, so
    # traffic after its optimizer step (ZeRO's all-gathers, metric reductions, logging
    # gathers) stays in it; without module forwards, from one optimizer step (or
    # commlens.step()) to the next. -1 is set-up: ops before the first step (DDP's
    # checks, deepspeed.initialize, a weights broadcast before the first forward). A
    # rank json's step windows have step -1 with "segment": "setup" for it, and a last
    # window that ran forwards but no optimizer step has "segment": "after last step"
    # (the tail). In a loop without forwards the ops before its first optimizer step or
    # commlens.step() are step 0's: written as -1 (their step was not known yet), they
    # are counted in step 0 by the reader from the rank's meta.STEP0_FROM_SEQ on.
    ("step", pa.int32(), "training step from 0; -1 = set-up before the first step"),
    ("phase", pa.string(), "forward, backward, optimizer or other"),
    ("module", pa.string(), "innermost module running when the op was issued"),
]

# Columns an events file holds only where its ops ran on a device (a run imported
# from GPU profiler traces, time semantics "device"): the op's CPU side kept beside
# the kernel interval that t_issue_ns/t_end_ns hold there. Readers that do not ask
# for them never see them; :func:`commlens.trace.reader.RunView.read_device` reads
# them (nulls for a file without them).
DEVICE_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    (
        "t_cpu_issue_ns",
        pa.int64(),
        "when the CPU issued the op (its record_param_comms / c10d call), on the rank's "
        "clock; null for an op seen only as a kernel, and in host-time runs (t_issue_ns "
        "is the call there)",
    ),
    ("stream", pa.int32(), "the device stream its kernel ran on; null for an op without one"),
]
DEVICE_COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in DEVICE_COLUMNS)

TAIL_SEGMENT = "after last step"
"""A step window's ``segment`` for the forwards after the last optimizer step."""
STEP0_FROM_SEQ = "step0_from_seq"
"""Rank meta key: events written as set-up from this seq on belong to step 0."""

EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in _COLUMNS)
COLUMN_DOCS: dict[str, str] = {name: doc for name, _, doc in [*_COLUMNS, *DEVICE_COLUMNS]}
EVENT_SCHEMA = pa.schema(
    [pa.field(name, typ) for name, typ, _ in _COLUMNS],
    metadata={SCHEMA_KEY: str(FORMAT_VERSION).encode()},
)
DEVICE_EVENT_SCHEMA = pa.schema(
    [*EVENT_SCHEMA, *(pa.field(name, typ) for name, typ, _ in DEVICE_COLUMNS)],
    metadata=EVENT_SCHEMA.metadata,
)
"""The events schema of a run whose ops ran on a device (EVENT_SCHEMA + DEVICE_COLUMNS)."""

# Bounds the values of these columns must lie in (nulls aside), checked when a
# rank file is opened, so no analysis meets an overflowing time or size.
MAX_BYTES = 1 << 40
"""Largest message a rank file may record (1 TiB)."""
MAX_RANK_BYTES = 1 << 52
"""Largest total of a size column over one rank file (events × largest value), so
that sums over ranks stay within int64."""
COLUMN_BOUNDS: dict[str, tuple[int, int]] = {
    "seq": (0, MAX_TIME_NS),
    "count": (0, MAX_BYTES),
    "bytes_in": (0, MAX_BYTES),
    "bytes_out": (0, MAX_BYTES),
    "size_bytes": (0, MAX_BYTES),
    "group_size": (0, MAX_WORLD),
    "t_issue_ns": (0, MAX_TIME_NS),
    "t_end_ns": (0, MAX_TIME_NS),
    # A wall clock stepping back may leave a wait a little below 0.
    "t_wait_ns": (-(1 << 40), MAX_TIME_NS),
    "t_cpu_issue_ns": (0, MAX_TIME_NS),
}
SUMMED_COLUMNS = ("count", "bytes_in", "bytes_out", "size_bytes")
