"""Columns of the per-rank events file and the canonical op names.

Every event is one communication call as a rank saw it. Times are integer
nanoseconds on the rank's wall clock as written; the reader shifts them onto
rank 0's clock with the offsets in the manifest.
"""

from __future__ import annotations

import pyarrow as pa

from commlens.spec.ops import OPS as OPS  # re-exported: canonical op names
from commlens.spec.ops import PHASES as PHASES

FORMAT_VERSION = 1
SCHEMA_KEY = b"commlens.format"
RANK_KEY = b"commlens.rank"

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
    ("step", pa.int32(), "training step (optimizer steps, or commlens.step())"),
    ("phase", pa.string(), "forward, backward, optimizer or other"),
    ("module", pa.string(), "innermost module running when the op was issued"),
]

EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in _COLUMNS)
COLUMN_DOCS: dict[str, str] = {name: doc for name, _, doc in _COLUMNS}
EVENT_SCHEMA = pa.schema(
    [pa.field(name, typ) for name, typ, _ in _COLUMNS],
    metadata={SCHEMA_KEY: str(FORMAT_VERSION).encode()},
)
