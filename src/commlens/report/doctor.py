"""``commlens doctor``'s output: the diagnosis first, then the evidence."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from commlens.doctor.model import Diagnosis, Evidence
from commlens.report.document import Column, Document, Section
from commlens.trace.files import format_ranks

MAX_STACK_LINES = 60
"""Lines of one rank's stacks shown (the JSON keeps them all)."""


def _table(rows: list[dict[str, Any]], keys: list[str]) -> pa.Table:
    return pa.table({k: pa.array([r.get(k) for r in rows]) for k in keys})


def _string_table(rows: list[dict[str, Any]], keys: list[str]) -> pa.Table:
    return pa.table({k: pa.array([str(r.get(k, "")) for r in rows], pa.string()) for k in keys})


def doctor_document(ev: Evidence, diag: Diagnosis) -> Document:
    """The headline as the title, each finding a line, then the groups' state and the stacks."""
    doc = Document(title=diag.headline)
    doc.facts = [
        ("source", f"{ev.source}: {ev.path}"),
        ("ranks", f"{ev.world_size} ({sum(1 for f in ev.ranks.values() if f.recorded)} recorded)"),
        ("groups", str(len(ev.groups))),
        ("root ranks", format_ranks(diag.root_ranks) or "none"),
    ]
    doc.warnings = list(ev.warnings)
    doc.intro = list(diag.explanation)
    doc.sections = _sections(ev, diag)
    doc.data = _data(ev, diag)
    return doc


def _sections(ev: Evidence, diag: Diagnosis) -> list[Section]:
    """The evidence: the first mismatch, the stragglers, the groups' state, the stacks."""
    sections = []
    if diag.mismatch:
        cols = ["group", "seq", "rank", "op", "shape", "dtype", "bytes", "site"]
        sections.append(
            Section(
                "mismatch",
                "First op where the members disagree",
                _string_table(diag.mismatch, cols),
                [Column(k, k) for k in cols],
            )
        )
    if diag.stragglers:
        cols = ["rank", "instances", "last_count", "blame_per_step_s", "step_s", "cost_share"]
        sections.append(
            Section(
                "stragglers",
                "Ranks arriving last",
                _table(diag.stragglers, cols),
                [
                    Column("rank", "rank", "int"),
                    Column("instances", "collectives", "int"),
                    Column("last_count", "arrived last", "int"),
                    Column("blame_per_step_s", "others' wait per step (s)", "{:.4f}"),
                    Column("step_s", "step (s)", "{:.4f}"),
                    Column("cost_share", "share of the step (%)", "pct"),
                ],
            )
        )
    if diag.groups_state:
        cols = ["group", "desc", "rank", "last_completed", "in_flight", "waits_on"]
        sections.append(
            Section(
                "groups",
                "Groups with ops in flight: per member, the last op completed and those in flight",
                _string_table(diag.groups_state, cols),
                [
                    Column("group", "group"),
                    Column("desc", "role"),
                    Column("rank", "rank"),
                    Column("last_completed", "last completed"),
                    Column("in_flight", "in flight"),
                    Column("waits_on", "waits on"),
                ],
                group_by="group",
            )
        )
    stack_rows = [
        {"rank": str(rank), "line": line}
        for rank, text in sorted(ev.stacks.items())
        for line in text.splitlines()[:MAX_STACK_LINES]
    ]
    if stack_rows:
        sections.append(
            Section(
                "stacks",
                "Python stacks of every rank, dumped while it hung (all threads)",
                _string_table(stack_rows, ["rank", "line"]),
                [Column("rank", "rank"), Column("line", "stack")],
                group_by="rank",
            )
        )
    return sections


def _data(ev: Evidence, diag: Diagnosis) -> dict[str, Any]:
    """The JSON of the diagnosis: its kind and root ranks first, every finding in full."""
    return {
        "kind": diag.kind,
        "headline": diag.headline,
        "root_ranks": diag.root_ranks,
        "victims": diag.victims,
        "cycle": diag.cycle,
        "dead_ranks": diag.dead_ranks,
        "explanation": diag.explanation,
        "source": ev.source,
        "path": ev.path,
        "world_size": ev.world_size,
        "waits": [
            {
                "rank": w.rank,
                "group": w.op.group,
                "seq": w.op.seq,
                "op": w.op.op,
                "peer": w.op.peer,
                "on": list(w.on),
                "t_issue_ns": w.op.t_issue_ns,
                "site": w.op.site,
            }
            for w in diag.waits
        ],
        "mismatch": diag.mismatch,
        "stragglers": diag.stragglers,
        "groups": diag.groups_state,
        "ranks": {
            str(r): {
                "status": f.status,
                "exit_code": f.exit_code,
                "signal": f.signal or None,
                "recorded": f.recorded,
            }
            for r, f in sorted(ev.ranks.items())
        },
        "stacks": {str(r): t for r, t in sorted(ev.stacks.items())},
        "warnings": ev.warnings,
    }
