"""What ``commlens net list`` and ``net show`` print: network profiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from commlens.report.document import Column, Document, Section

if TYPE_CHECKING:
    from commlens.predict.profiles import NetworkProfile

PROFILE_COLUMNS = (
    Column("name", "name"),
    Column("scope", "scope"),
    Column("latency_us", "latency (µs)", "{:.2f}"),
    Column("bandwidth_Gbps", "bandwidth (Gbit/s)", "{:g}"),
    Column("efficiency", "efficiency", "{:.2f}"),
    Column("effective_Gbps", "effective (Gbit/s)", "{:g}"),
    Column("description", "description"),
)
OP_COLUMNS = (
    Column("op", "op"),
    Column("alpha_us", "alpha (µs)", "{:.3f}"),
    Column("beta_s_per_byte", "beta (s/byte)", "{:.4g}"),
    Column("effective_Gbps", "effective (Gbit/s)", "{:.3f}"),
)


def profiles_document(profiles: Sequence[NetworkProfile]) -> Document:
    """One row per profile; ``data`` is the list of the profiles' dicts."""
    table = pa.table(
        {
            "name": [p.name for p in profiles],
            "scope": [p.scope for p in profiles],
            "latency_us": [p.latency_s * 1e6 for p in profiles],
            "bandwidth_Gbps": [float(p.bandwidth_Gbps) for p in profiles],
            "efficiency": [float(p.efficiency) for p in profiles],
            "effective_Gbps": [float(p.effective_Gbps) for p in profiles],
            "description": [p.description for p in profiles],
        }
    )
    return Document(
        title="network profiles (built-in)",
        sections=[Section("profiles", "", table, PROFILE_COLUMNS)],
        data=[p.to_dict() for p in profiles],
    )


def profile_document(p: NetworkProfile) -> Document:
    """One profile's fields, and its per-op overrides when it has any; ``data`` is its dict."""
    facts = [
        ("description", p.description),
        ("scope", p.scope),
        ("latency (µs)", f"{p.latency_s * 1e6:.3f}"),
        ("bandwidth (Gbit/s)", f"{p.bandwidth_Gbps:g}"),
        ("efficiency", f"{p.efficiency:.3f}"),
        ("effective (Gbit/s)", f"{p.effective_Gbps:.3f}"),
        ("source", p.source),
    ]
    sections = []
    if p.ops:
        ops = sorted(p.ops)
        betas = [p.beta(op) for op in ops]
        table = pa.table(
            {
                "op": ops,
                "alpha_us": [p.alpha(op) * 1e6 for op in ops],
                "beta_s_per_byte": betas,
                "effective_Gbps": [8 / b / 1e9 if b > 0 else float("inf") for b in betas],
            }
        )
        sections.append(Section("ops", "per-op overrides", table, OP_COLUMNS))
    return Document(
        title=f"network profile {p.name}", facts=facts, sections=sections, data=p.to_dict()
    )
