"""Link utilization over time, in Gbit/s (1e9 bit/s).

From NIC counters, the measurement of the link: when the run directory holds
``nic.parquet`` (written by ``commlens.netem``), the byte-counter deltas per
node and sampling interval; an interval shorter than half the sampling period
(the sample taken at stop, a late wake-up) is merged into the next, since a
few bytes over a fraction of a millisecond would read as a rate no link has.
From the events: each op's wire bytes (ring convention, conventions §2) spread
evenly over ``[t_issue, t_end]`` and binned per rank; and, for a run on
several nodes, the part of them that crosses between nodes, per node
(:func:`inter_node_utilization`). Means are over the job's own window (its
first op to its last), never over counters sampled before or after it. Times
are seconds from the run's first op (or first sample without events).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from commlens.analysis.internode import nic_rates
from commlens.analysis.internode import rank_nodes as rank_nodes  # re-exported
from commlens.analysis.internode import sampling_interval as sampling_interval  # re-exported
from commlens.analysis.rankpass import RankPass, Source, rank_pass


def event_utilization(run: Source, bins: int = 100) -> pa.Table:
    """Per rank and time bin: ``t_s`` (bin start), ``bin_s``, ``wire_bytes``, ``gbit_s``."""
    util = rank_pass(run, util_bins=bins).util
    assert util is not None
    return util


def nic_utilization(run: Source) -> pa.Table | None:
    """Per node and sampling interval: ``t_s`` (interval end), tx/rx Gbit/s; None without
    a NIC counters file."""
    rp = rank_pass(run, nic=True)
    if rp.nic is None:
        return None
    return nic_rates(rp.nic, rp.span[0] if rp.span is not None else None)


def link_gbit(manifest: dict[str, Any]) -> float | None:
    """The rate of each node's link in Gbit/s, from the run's topology (None: unshaped,
    one node, or not recorded)."""
    topology = manifest.get("topology")
    rate = topology.get("link_bits_per_s") if isinstance(topology, dict) else None
    return float(rate) / 1e9 if isinstance(rate, (int, float)) and rate > 0 else None


def burst_bytes(manifest: dict[str, Any]) -> int | None:
    """The token bucket's burst of the shaped link (bytes it lets through above the rate)."""
    topology = manifest.get("topology")
    burst = topology.get("burst_bytes") if isinstance(topology, dict) else None
    return int(burst) if isinstance(burst, (int, float)) and burst > 0 else None


def inter_node_utilization(rp: RankPass) -> pa.Table | None:
    """Per node and time bin: the wire bytes its ranks send to other nodes, ``t_s``,
    ``bin_s``, ``wire_bytes``, ``gbit_s`` (:attr:`RankPass.inter`: the bins are the NIC
    counters' sampling interval when the pass read them, making the two lines
    comparable, else the event utilization's). None unless the run's ranks are on two
    nodes or more."""
    return rp.inter


def utilization_summary(run: Source, bins: int = 100, inter: pa.Table | None = None) -> pa.Table:
    """Per node from the NIC counters (the link's measurement, first), per node the events'
    inter-node part (``inter``, from :func:`inter_node_utilization`), then per rank all of
    the events' traffic, intra-node included: mean and peak Gbit/s over the job's window,
    and the bytes in it."""
    rp = rank_pass(run, util_bins=bins, nic=True)
    ev = event_utilization(rp, bins)
    rows: list[tuple[str, str, float, float, float]] = []
    window = (rp.span[1] - rp.span[0]) / 1e9 if rp.span is not None else 0.0
    nic = nic_utilization(rp)
    if nic is not None and nic.num_rows:
        rows += _nic_rows(nic, window)
    for source, unit, table in (("events inter-node", "node", inter), ("events", "rank", ev)):
        if table is None or not table.num_rows:
            continue
        keys = table.column(unit).to_numpy()
        gbit = table.column("gbit_s").to_numpy()
        wire = table.column("wire_bytes").to_numpy()
        span = window or float(table.column("bin_s")[0].as_py()) * int(np.sum(keys == keys[0]))
        for k in np.unique(keys):
            mask = keys == k
            total = float(wire[mask].sum())
            rows.append(
                (source, f"{unit} {int(k)}", total * 8 / span / 1e9, float(gbit[mask].max()), total)
            )
    return pa.table(
        {
            "source": pa.array([r[0] for r in rows], pa.string()),
            "unit": pa.array([r[1] for r in rows], pa.string()),
            "mean_gbit_s": pa.array([r[2] for r in rows], pa.float64()),
            "peak_gbit_s": pa.array([r[3] for r in rows], pa.float64()),
            "bytes": pa.array([r[4] for r in rows], pa.float64()),
        }
    )


def _nic_rows(nic: pa.Table, window: float) -> list[tuple[str, str, float, float, float]]:
    """Per node: tx mean and peak over the intervals that overlap the job's window
    ``[0, window]`` s, each one's bytes counted by the share of it inside."""
    nodes = nic.column("node").to_numpy()
    end = nic.column("t_s").to_numpy()
    dt = nic.column("interval_s").to_numpy()
    tx_g = nic.column("tx_gbit_s").to_numpy()
    tx_b = nic.column("tx_bytes").to_numpy().astype(float)
    start = end - dt
    if window <= 0:  # no events: the counters' own span
        window = float(end.max() - start.min())
        start, end = start - start.min(), end - start.min()
    inside = np.clip(np.minimum(end, window) - np.maximum(start, 0.0), 0.0, None)
    share = np.where(dt > 0, inside / np.where(dt > 0, dt, 1.0), 0.0)
    rows = []
    for n in np.unique(nodes):
        mask = (nodes == n) & (inside > 0)
        total = float((tx_b[mask] * share[mask]).sum())
        peak = float(tx_g[mask].max()) if mask.any() else 0.0
        rows.append(
            ("nic tx", f"node {int(n)}", total * 8 / window / 1e9 if window else 0.0, peak, total)
        )
    return rows
