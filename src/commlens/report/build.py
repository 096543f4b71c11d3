"""Assemble the report of one run from the analyses."""

from __future__ import annotations

from typing import Any

from commlens.analysis.ops import op_size_table, op_table
from commlens.analysis.source import RunView
from commlens.report.document import Column, Document, Section

OP_COLUMNS = (
    Column("op", "op"),
    Column("pg_name", "group"),
    Column("pg_ranks", "group ranks", "ranks"),
    Column("role", "role"),
    Column("ranks", "ranks", "int"),
    Column("count", "count", "int"),
    Column("bytes", "bytes", "bytes"),
    Column("time_s", "time (s)", "s"),
    Column("avg_latency_s", "avg lat (us)", "us"),
    Column("algbw_GBps", "algbw (GB/s)", "gbps"),
    Column("busbw_GBps", "busbw (GB/s)", "gbps"),
)

# Keys of each "ops" entry in the JSON report (the contract of issue 2, extended).
OP_KEYS = (
    "op",
    "pg_name",
    "pg_ranks",
    "group_size",
    "role",
    "ranks",
    "count",
    "bytes",
    "time_s",
    "avg_latency_s",
    "algbw_GBps",
    "busbw_GBps",
)


def run_facts(run: RunView) -> list[tuple[str, str]]:
    m = run.manifest
    facts = [
        ("run", str(run.path)),
        ("world size", str(run.world_size)),
        ("backend", str(m.get("backend", "?"))),
    ]
    if m.get("torch_version"):
        facts.append(("torch", str(m["torch_version"])))
    workload = m.get("workload")
    if isinstance(workload, dict) and workload:
        facts.append(
            (
                "workload",
                ", ".join(
                    f"{k}={v}"
                    for k, v in sorted(workload.items())
                    if not isinstance(v, (dict, list))
                ),
            )
        )
    if run.missing_ranks:
        facts.append(
            (
                "missing ranks",
                ", ".join(str(r) for r in run.missing_ranks)
                + " (excluded from cross-rank figures)",
            )
        )
    return facts


def build_report(run: RunView) -> Document:
    ops = op_table(run)
    sections = [Section("ops", "Communication by op and process group", ops, OP_COLUMNS)]
    data: dict[str, Any] = {
        "run": run.manifest,
        "ops": [{k: row[k] for k in OP_KEYS} for row in ops.to_pylist()],
        "missing_ranks": run.missing_ranks,
        "warnings": run.warnings,
    }
    return Document(
        title=f"commlens report: {run.name}",
        facts=run_facts(run),
        sections=sections,
        warnings=list(run.warnings),
        data=data,
        csv_table=op_size_table(run),
    )
