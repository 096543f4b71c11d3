"""Link utilization over time, in Gbit/s (1e9 bit/s).

From the events: each op's wire bytes (ring convention, conventions §2) spread
evenly over ``[t_issue, t_end]`` and binned per rank. From NIC counters: when
the run directory holds ``nic.parquet`` (written by ``commlens.netem``), the
byte-counter deltas per node and sampling interval. Times are seconds from
the run's first op (or first sample without events).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from commlens.analysis.rankpass import Source, rank_pass


def event_utilization(run: Source, bins: int = 100) -> pa.Table:
    """Per rank and time bin: ``t_s`` (bin start), ``bin_s``, ``wire_bytes``, ``gbit_s``."""
    util = rank_pass(run, util_bins=bins).util
    assert util is not None
    return util


def nic_utilization(run: Source) -> pa.Table | None:
    """Per node and sampling interval: ``t_s`` (interval end), tx/rx Gbit/s; None without
    a NIC counters file."""
    rp = rank_pass(run, nic=True)
    table = rp.nic
    if table is None:
        return None
    empty = {
        "node": pa.array([], pa.int32()),
        "t_s": pa.array([], pa.float64()),
        "tx_gbit_s": pa.array([], pa.float64()),
        "rx_gbit_s": pa.array([], pa.float64()),
        "tx_bytes": pa.array([], pa.int64()),
        "rx_bytes": pa.array([], pa.int64()),
    }
    if table.num_rows < 2:
        return pa.table(empty)
    origin = rp.span[0] if rp.span is not None else None
    t = table.column("t_ns").to_numpy()
    node = table.column("node").to_numpy()
    tx = table.column("tx_bytes").to_numpy()
    rx = table.column("rx_bytes").to_numpy()
    t0 = origin if origin is not None else int(t.min())
    order = np.lexsort((t, node))
    t, node, tx, rx = t[order], node[order], tx[order], rx[order]
    same = (node[1:] == node[:-1]) & (t[1:] > t[:-1])
    dt = (t[1:] - t[:-1])[same] / 1e9
    dtx = (tx[1:] - tx[:-1])[same]
    drx = (rx[1:] - rx[:-1])[same]
    return pa.table(
        {
            "node": pa.array(node[1:][same], pa.int32()),
            "t_s": pa.array((t[1:][same] - t0) / 1e9, pa.float64()),
            "tx_gbit_s": pa.array(dtx * 8 / dt / 1e9, pa.float64()),
            "rx_gbit_s": pa.array(drx * 8 / dt / 1e9, pa.float64()),
            "tx_bytes": pa.array(dtx, pa.int64()),
            "rx_bytes": pa.array(drx, pa.int64()),
        }
    )


def utilization_summary(run: Source, bins: int = 100) -> pa.Table:
    """Per rank (events) and per node (NIC): mean and peak Gbit/s."""
    run = rank_pass(run, util_bins=bins, nic=True)
    ev = event_utilization(run, bins)
    sources, units, means, peaks, total = [], [], [], [], []
    if ev.num_rows:
        ranks = ev.column("rank").to_numpy()
        gbit = ev.column("gbit_s").to_numpy()
        wire = ev.column("wire_bytes").to_numpy()
        span = float(ev.column("bin_s")[0].as_py()) * bins
        for r in np.unique(ranks):
            mask = ranks == r
            sources.append("events")
            units.append(f"rank {int(r)}")
            means.append(float(wire[mask].sum()) * 8 / span / 1e9)
            peaks.append(float(gbit[mask].max()))
            total.append(float(wire[mask].sum()))
    nic = nic_utilization(run)
    if nic is not None and nic.num_rows:
        nodes = nic.column("node").to_numpy()
        tx_g = nic.column("tx_gbit_s").to_numpy()
        tx_b = nic.column("tx_bytes").to_numpy()
        t_s = nic.column("t_s").to_numpy()
        for n in np.unique(nodes):
            mask = nodes == n
            sources.append("nic tx")
            units.append(f"node {int(n)}")
            span_n = float(t_s[mask].max() - t_s[mask].min()) or 1.0
            means.append(float(tx_b[mask].sum()) * 8 / span_n / 1e9)
            peaks.append(float(tx_g[mask].max()))
            total.append(float(tx_b[mask].sum()))
    return pa.table(
        {
            "source": pa.array(sources, pa.string()),
            "unit": pa.array(units, pa.string()),
            "mean_gbit_s": pa.array(means, pa.float64()),
            "peak_gbit_s": pa.array(peaks, pa.float64()),
            "bytes": pa.array(total, pa.float64()),
        }
    )
