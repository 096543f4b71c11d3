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

from commlens.analysis.bandwidth import bus_factor
from commlens.analysis.rankpass import RankPass, Source, rank_pass
from commlens.analysis.timeline import spread
from commlens.optable import P2P_OPS, SENDS
from commlens.trace.reader import RunView

SHORT = 0.5
"""A NIC interval shorter than this share of the median interval is merged into the next."""


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
    keep = _sample_ends(t, node)
    t, node, tx, rx = t[keep], node[keep], tx[keep], rx[keep]
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
            "interval_s": pa.array(dt, pa.float64()),
        }
    )


def _sample_ends(t: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Which samples (sorted by node, then time) end an interval: each node's first,
    then every sample at least :data:`SHORT` of the median interval after the last kept
    one (the node's last sample replaces the kept one before it when it comes too soon)."""
    keep = np.zeros(t.size, dtype=bool)
    for n in np.unique(node):
        idx = np.flatnonzero(node == n)
        steps = np.diff(t[idx])
        least = SHORT * float(np.median(steps)) if steps.size else 0.0
        kept = [idx[0]]
        for i in idx[1:]:
            if t[i] - t[kept[-1]] >= least:
                kept.append(i)
        if kept[-1] != idx[-1] and len(kept) > 1:
            kept[-1] = idx[-1]  # the stop sample closes the last interval
        keep[kept] = True
    return keep


def rank_nodes(manifest: dict[str, Any]) -> dict[int, int]:
    """Each rank's node, from its launch record (``commlens run`` on emulated nodes) or,
    failing that, its host name (nodes numbered in the order their hosts first appear)."""
    ranks = manifest.get("ranks")
    if not isinstance(ranks, dict):
        return {}
    out: dict[int, int] = {}
    hosts: dict[str, int] = {}
    for key, entry in sorted(
        ranks.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else -1
    ):
        if not str(key).isdigit() or not isinstance(entry, dict):
            continue
        launch = (
            (entry.get("meta") or {}).get("launch") if isinstance(entry.get("meta"), dict) else None
        )
        node = launch.get("node") if isinstance(launch, dict) else None
        if node is not None and str(node).isdigit():
            out[int(key)] = int(node)
        elif isinstance(entry.get("host"), str):
            out[int(key)] = hosts.setdefault(entry["host"], len(hosts))
    return out


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


def inter_node_utilization(
    view: RunView, rp: RankPass, bin_s: float | None = None
) -> pa.Table | None:
    """Per node and time bin (the bins of ``rp``'s event utilization): the wire bytes its
    ranks send to other nodes, ``t_s``, ``bin_s``, ``wire_bytes``, ``gbit_s``. At the ring
    convention a rank sends a collective's wire bytes to the next member of the group
    (group order, wrapping), so they cross when that member is on another node; a send
    crosses when its peer does; a receive sends nothing. ``bin_s``: the bins' length
    (default: the event utilization's; the NIC's sampling interval makes the two lines
    comparable). None unless the run's ranks are on two nodes or more."""
    nodes = rank_nodes(view.manifest)
    if len(set(nodes.values())) < 2 or rp.util is None or rp.span is None:
        return None
    groups = view.sql("SELECT DISTINCT rank, pg_name, pg_ranks FROM events").to_pylist()
    crossing = {
        (g["rank"], g["pg_name"]): _crosses(g["rank"], g["pg_ranks"], nodes) for g in groups
    }
    events = view.sql(
        "SELECT rank, pg_name, op, group_size, size_bytes, peer, t_issue_ns, t_end_ns FROM events"
    )
    rank = events.column("rank").to_numpy()
    op = events.column("op").to_pylist()
    pg = events.column("pg_name").to_pylist()
    size = np.asarray(events.column("size_bytes").fill_null(0).to_numpy(), dtype=float)
    gsize = events.column("group_size").fill_null(1).to_pylist()
    peer = events.column("peer").to_pylist()
    factor = np.array(
        [
            _cross_factor(o, n, int(r), p, crossing.get((int(r), g), False), nodes)
            for o, n, r, p, g in zip(op, gsize, rank, peer, pg, strict=True)
        ]
    )
    wire = size * factor if factor.size else np.zeros(0)
    s = events.column("t_issue_ns").to_numpy()
    e = np.maximum(events.column("t_end_ns").to_numpy(), s)
    if not bin_s:
        bin_s = float(rp.util.column("bin_s")[0].as_py()) if rp.util.num_rows else 1.0
    bin_ns = max(1, round(bin_s * 1e9))
    n_bins = max(rp.span[1] - rp.span[0], 0) // bin_ns + 1
    node_of = np.array([nodes.get(int(r), -1) for r in rank])
    parts = []
    for n in sorted(set(nodes.values())):
        mine = node_of == n
        per_bin = spread(s[mine], e[mine], wire[mine], rp.span[0], bin_ns, n_bins)
        parts.append((n, per_bin))
    return pa.table(
        {
            "node": pa.array(np.concatenate([np.full(b.size, n) for n, b in parts]), pa.int32()),
            "t_s": pa.array(np.concatenate([np.arange(b.size) * bin_s for _, b in parts])),
            "bin_s": pa.array(np.full(sum(b.size for _, b in parts), bin_s)),
            "wire_bytes": pa.array(np.concatenate([b for _, b in parts]), pa.float64()),
            "gbit_s": pa.array(np.concatenate([b * 8 / bin_s / 1e9 for _, b in parts])),
        }
    )


def _crosses(rank: int, members: list[int] | None, nodes: dict[int, int]) -> bool:
    """Whether ``rank``'s ring successor in the group ``members`` is on another node."""
    ring = list(members or [])
    if rank not in ring or len(ring) < 2:
        return False
    nxt = ring[(ring.index(rank) + 1) % len(ring)]
    return nodes.get(nxt, -1) != nodes.get(rank, -2)


def _cross_factor(
    op: str, n: int, rank: int, peer: int | None, crossing: bool, nodes: dict[int, int]
) -> float:
    """The share of an op's size this rank sends across nodes (ring convention)."""
    if op in P2P_OPS:
        return (
            1.0 if op in SENDS and peer is not None and nodes.get(peer) != nodes.get(rank) else 0.0
        )
    return bus_factor(op, int(n or 1)) if crossing else 0.0


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


def sampling_interval(nic: pa.Table | None) -> float | None:
    """The NIC counters' median sampling interval (s), None without counters."""
    if nic is None or not nic.num_rows:
        return None
    return float(np.median(nic.column("interval_s").to_numpy()))
