"""The NIC counters file of a run: ``nic.parquet`` (:data:`commlens.trace.layout.NIC_FILE`),
written by :mod:`commlens.netem`'s sampler while a job runs on emulated nodes, read
by the analyses. One row per node per sample:

=============  =======  ===========================================================
column         type     meaning
=============  =======  ===========================================================
``t_ns``       int64    wall-clock time of the sample, ``time.time_ns()`` (UNIX ns)
``node``       int32    node index (ranks ``node*per_node ...`` run there)
``iface``      string   host-side veth whose counters were read
``tx_bytes``   int64    bytes the node sent on its link since the first sample
``rx_bytes``   int64    bytes the node received on its link since the first sample
=============  =======  ===========================================================

Counters are cumulative and start at 0; they count Ethernet frames (IP/TCP
headers included), as a NIC does. Only traffic between nodes crosses a link:
ranks of one node talk over loopback, which is not counted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from commlens.safefile import open_regular
from commlens.trace.layout import NIC_FILE

SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("node", pa.int32()),
        ("iface", pa.string()),
        ("tx_bytes", pa.int64()),
        ("rx_bytes", pa.int64()),
    ]
)


def read_nic(path: str | os.PathLike[str]) -> pa.Table:
    """The counters file (``nic.parquet`` or a run directory holding one)."""
    p = Path(path)
    file = p / NIC_FILE if p.is_dir() else p
    fd = open_regular(file, follow=not p.is_dir())  # never a FIFO, a device or a planted link
    with os.fdopen(fd, "rb") as fh:
        return pq.read_table(fh)
