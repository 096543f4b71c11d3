"""Nodes of a run: which node each rank is on, its NIC counters' rates, and the part of
each rank's wire bytes that crosses to another node, binned per node.

At the ring convention a rank sends a collective's wire bytes to the next
member of the group (group order, wrapping), so they cross when that member
is on another node; a send crosses when its peer does; a receive sends
nothing. :class:`InterNode` adds up one rank's events at a time (the rank
pass's), so the whole run's events are never held at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.analysis.bandwidth import bus_factor
from commlens.analysis.codes import dense_codes
from commlens.analysis.timeline import spread
from commlens.optable import P2P_OPS, SENDS

SHORT = 0.5
"""A NIC interval shorter than this share of the median interval is merged into the next."""


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


def nic_rates(table: pa.Table, origin: int | None) -> pa.Table:
    """Per node and sampling interval of the NIC counters ``table``: ``t_s`` (interval
    end, s from ``origin``, else from the first sample), tx/rx Gbit/s and bytes,
    ``interval_s``; a short interval is merged into the next (see :data:`SHORT`)."""
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


def sampling_interval(nic: pa.Table | None) -> float | None:
    """The NIC counters' median sampling interval (s), None without counters."""
    if nic is None or not nic.num_rows:
        return None
    return float(np.median(nic.column("interval_s").to_numpy()))


@dataclass
class InterNode:
    """Wire bytes each node's ranks send to other nodes, per time bin of ``bin_s``
    seconds from ``t0`` (ns): each rank's (:meth:`rank_bins`) added to its node's
    (:meth:`add`), rank by rank."""

    nodes: dict[int, int]
    t0: int
    bin_s: float
    bin_ns: int
    n_bins: int
    bins: dict[int, np.ndarray] = field(default_factory=dict)

    @staticmethod
    def of(manifest: dict[str, Any], span: tuple[int, int], bin_s: float) -> InterNode | None:
        """The accumulator of a run on two nodes or more (None otherwise)."""
        nodes = rank_nodes(manifest)
        if len(set(nodes.values())) < 2:
            return None
        bin_ns = max(1, round(bin_s * 1e9))
        n_bins = max(span[1] - span[0], 0) // bin_ns + 1
        bins = {n: np.zeros(n_bins) for n in sorted(set(nodes.values()))}
        return InterNode(nodes, span[0], bin_s, bin_ns, n_bins, bins)

    def rank_bins(
        self,
        rank: int,
        ops: list[str],
        members: dict[int, list[int]],
        calls: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        times: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> np.ndarray | None:
        """One rank's events: ``calls`` = (op code into ``ops``, group code (``members``:
        the ranks of each of the rank's groups), group size, peer rank or -1 where
        none), ``times`` = (issue, end, message size): the wire bytes it sends to other
        nodes per bin (None for a rank on no known node)."""
        node = self.nodes.get(rank)
        if node is None:
            return None
        if not calls[0].size:
            return np.zeros(self.n_bins)
        op, pg, gsize, peer = calls
        s, e, size = times
        combo = (pg.astype(np.int64) * 65536 + op) * 65536 + np.minimum(gsize, 65535)
        uniq, inverse = dense_codes(combo)
        factor = np.zeros(uniq.size)
        is_send = np.zeros(uniq.size, bool)
        for i, value in enumerate(uniq.tolist()):
            name, n = ops[value // 65536 % 65536], value % 65536
            if name in P2P_OPS:
                is_send[i] = name in SENDS
            elif _crosses(rank, members[value // 65536**2], self.nodes):
                factor[i] = bus_factor(name, int(n or 1))
        per_event = factor[inverse]
        sends = is_send[inverse] & (peer >= 0)
        if sends.any():
            lookup = np.full(max(int(peer.max()), rank) + 1, -1, np.int64)
            for r, n in self.nodes.items():
                if r < lookup.size:
                    lookup[r] = n
            per_event[sends] = (lookup[peer[sends]] != node).astype(np.float64)
        wire = size.astype(np.float64) * per_event
        return spread(s, e, wire, self.t0, self.bin_ns, self.n_bins)

    def add(self, rank: int, bins: np.ndarray | None) -> None:
        """Add a rank's :meth:`rank_bins` to its node's."""
        if bins is not None:
            self.bins[self.nodes[rank]] += bins

    def table(self) -> pa.Table:
        """Per node and bin: ``t_s``, ``bin_s``, ``wire_bytes``, ``gbit_s``."""
        parts = list(self.bins.items())
        bin_s = self.bin_s
        return pa.table(
            {
                "node": pa.array(
                    np.concatenate([np.full(b.size, n) for n, b in parts]), pa.int32()
                ),
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
