"""NIC byte counters of the emulated nodes, sampled while a job runs.

The file's format and its reader: :mod:`commlens.trace.nic`. Only traffic
between nodes crosses a link. The sampler reads
``/sys/class/net/<iface>/statistics`` (a node's tx is its veth peer's rx) at
``hz`` (default 20 Hz), always including one sample at start and one at stop.
:func:`link_utilization` turns the counters into Gbit/s per interval.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from commlens.safefile import open_binary
from commlens.trace.layout import NIC_FILE
from commlens.trace.nic import SCHEMA, read_nic

__all__ = ["NIC_FILE", "SCHEMA", "NicSampler", "link_utilization", "read_nic", "totals"]


def _read_counter(iface: str, name: str) -> int:
    return int(Path(f"/sys/class/net/{iface}/statistics/{name}").read_text())


class NicSampler:
    """Background thread sampling the host-side veth of each node.

    ``with NicSampler(ifaces, out_path): ...`` samples until the block ends,
    then writes ``out_path`` atomically (temporary file, then rename).
    """

    def __init__(self, ifaces: list[str], out_path: str | os.PathLike[str], hz: float = 20.0):
        if hz <= 0:
            raise ValueError("hz must be positive")
        self.ifaces = list(ifaces)
        self.out_path = Path(out_path)
        self.period_s = 1.0 / hz
        self._rows: list[tuple[int, int, str, int, int]] = []
        self._base: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="commlens-nic", daemon=True)

    def __enter__(self) -> NicSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        # A node's tx is what its bridge-side peer receives, and vice versa.
        now = time.time_ns()
        self._base = [
            (_read_counter(i, "rx_bytes"), _read_counter(i, "tx_bytes")) for i in self.ifaces
        ]
        self._rows = [(now, node, iface, 0, 0) for node, iface in enumerate(self.ifaces)]
        self._thread.start()

    def stop(self) -> Path:
        """Stop sampling and write the file; returns its path."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self._sample()
        table = pa.Table.from_pylist(
            [dict(zip(SCHEMA.names, row, strict=True)) for row in self._rows], schema=SCHEMA
        )
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        with open_binary(self.out_path, within=self.out_path.parent) as fh:
            pq.write_table(table, fh)
        return self.out_path

    def _loop(self) -> None:
        next_t = time.monotonic() + self.period_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self._sample()
            next_t += self.period_s

    def _sample(self) -> None:
        now = time.time_ns()
        for node, (iface, (rx0, tx0)) in enumerate(zip(self.ifaces, self._base, strict=True)):
            try:
                tx = _read_counter(iface, "rx_bytes") - rx0
                rx = _read_counter(iface, "tx_bytes") - tx0
            except (OSError, ValueError):  # interface already gone during teardown
                continue
            self._rows.append((now, node, iface, tx, rx))


def link_utilization(table: pa.Table) -> list[dict[str, float]]:
    """Per node and sampling interval: ``t_s`` (interval end, from the first
    sample), ``node``, ``tx_Gbit/s`` and ``rx_Gbit/s`` (1 Gbit = 1e9 bit)."""
    rows = sorted(table.to_pylist(), key=lambda r: (r["node"], r["t_ns"]))
    if not rows:
        return []
    t0 = min(r["t_ns"] for r in rows)
    out: list[dict[str, float]] = []
    for prev, cur in itertools.pairwise(rows):
        dt = (cur["t_ns"] - prev["t_ns"]) / 1e9
        if cur["node"] != prev["node"] or dt <= 0:
            continue
        out.append(
            {
                "t_s": (cur["t_ns"] - t0) / 1e9,
                "node": cur["node"],
                "tx_Gbit/s": (cur["tx_bytes"] - prev["tx_bytes"]) * 8 / dt / 1e9,
                "rx_Gbit/s": (cur["rx_bytes"] - prev["rx_bytes"]) * 8 / dt / 1e9,
            }
        )
    return out


def totals(table: pa.Table) -> dict[int, tuple[int, int]]:
    """Node → (tx_bytes, rx_bytes) over the whole run."""
    result: dict[int, tuple[int, int]] = {}
    for row in table.to_pylist():
        tx, rx = result.get(row["node"], (0, 0))
        result[row["node"]] = (max(tx, row["tx_bytes"]), max(rx, row["rx_bytes"]))
    return result
