"""Headline lines by node: the ranks that keep others waiting, and the clocks aligned."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa

from commlens.analysis.skew import late_nodes, late_ranks
from commlens.trace.files import format_ranks
from commlens.units import plural

SHOWN = 6
"""Nodes named one by one before the rest are summarised."""


def _rank_entries(manifest: dict[str, Any]) -> dict[int, dict[str, Any]]:
    ranks = manifest.get("ranks")
    if not isinstance(ranks, dict):
        return {}
    out: dict[int, dict[str, Any]] = {}
    for key, entry in ranks.items():
        if isinstance(entry, dict) and str(key).isdigit():
            out[int(key)] = entry
    return out


def _hosts(entries: dict[int, dict[str, Any]]) -> dict[int, str]:
    return {
        r: e["host"] for r, e in entries.items() if isinstance(e.get("host"), str) and e["host"]
    }


def late_line(manifest: dict[str, Any], stragglers: pa.Table) -> str | None:
    """'late ranks: 23, 59; all of node X (ranks 8..15)', or None when no rank stands out.

    A node is named when every one of its ranks is late (:func:`late_ranks`, or
    :func:`late_nodes`: late together) and the run has several.
    """
    hosts = _hosts(_rank_entries(manifest))
    by_host: dict[str, list[int]] = defaultdict(list)
    for r, h in hosts.items():
        by_host[h].append(r)
    several = len(by_host) > 1
    slow = set(late_nodes(stragglers, hosts)) if several else set()
    late = set(late_ranks(stragglers)) | {r for h in slow for r in by_host[h]}
    if not late:
        return None
    whole: list[str] = []
    rest = set(late)
    if several:
        for h, members in sorted(by_host.items()):
            if set(members) <= rest:
                whole.append(f"all of node {h} (ranks {format_ranks(sorted(members))})")
                rest -= set(members)
    parts = []
    if rest:
        parts.append(f"{'rank' if len(rest) == 1 else 'ranks'} {format_ranks(sorted(rest))}")
    parts += whole
    return "ranks that arrive late at collectives, well past the others: " + "; ".join(parts)


def clock_line(manifest: dict[str, Any]) -> str | None:
    """How far the nodes' clocks were apart (aligned before any analysis), or None."""
    entries = _rank_entries(manifest)
    hosts = _hosts(entries)
    by_rank = {
        r: e["clock"]["offset_ns"]
        for r, e in entries.items()
        if isinstance(e.get("clock"), dict) and isinstance(e["clock"].get("offset_ns"), int)
    }
    offsets: dict[str, set[int]] = defaultdict(set)
    for r, ns in by_rank.items():
        offsets[hosts.get(r, "")].add(ns)
    if "" in offsets or any(len(v) > 1 for v in offsets.values()):  # not one clock per node
        per = sorted((ns, f"rank {r}") for r, ns in by_rank.items())
        unit = "rank"
    else:
        per = sorted((min(v), h) for h, v in offsets.items())
        unit = "node"
    if len(per) < 2 or per[-1][0] == per[0][0]:
        return None

    def us(ns: int) -> str:
        return f"{ns / 1000:+.1f} µs"

    def listed(items: list[tuple[int, str]]) -> str:
        return ", ".join(f"{h} {us(ns)}" for ns, h in items)

    text = listed(per) if len(per) <= SHOWN else f"{listed(per[:2])} ... {listed(per[-2:])}"
    return (
        f"clocks of {plural(len(per), unit)} were offset by up to "
        f"{(per[-1][0] - per[0][0]) / 1000:.1f} µs ({text}); events aligned to rank 0's clock"
    )


def node_lines(manifest: dict[str, Any], stragglers: pa.Table) -> list[str]:
    """The headline's lines about late ranks and nodes' clocks (those that apply)."""
    return [line for line in (late_line(manifest, stragglers), clock_line(manifest)) if line]
