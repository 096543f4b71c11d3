"""After a run: run-level step metrics in the manifest, and the one-screen summary.

Each rank stored its own step records (``meta.steps_metrics``); the run-level
record of a step takes the slowest rank's time and the loss averaged over
the data-parallel ranks of the last pipeline stage. The communication figures
come from the captured events through :mod:`commlens.analysis`, over the
steps after warm-up only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.analysis import open_run, step_summary, step_table
from commlens.analysis.opshare import op_parts
from commlens.job.spec import Job
from commlens.trace.manifest import merge_manifest


def run_step_metrics(manifest: dict[str, Any], wcfg: Job) -> list[dict[str, Any]]:
    """One record per step over all ranks (time: slowest rank; loss: mean over dp)."""
    per_rank = [
        (int(rank), entry.get("meta", {}).get("steps_metrics") or [])
        for rank, entry in manifest.get("ranks", {}).items()
    ]
    out = []
    for step in range(wcfg.run.steps):
        rows = [(rank, recs[step]) for rank, recs in per_rank if len(recs) > step]
        if not rows:
            break
        time_s = max(r["time_s"] for _, r in rows)
        losses = [
            r["loss"]
            for rank, r in rows
            if r["loss"] is not None and wcfg.dims.coords(rank)["tp"] == 0
        ]
        out.append(
            {
                "step": step,
                "time_s": time_s,
                "loss": sum(losses) / len(losses) if losses else None,
                "tokens_per_s": wcfg.global_batch * wcfg.seq_len / time_s,
                "tflops": sum(r["tflops"] for _, r in rows) / len(rows),
                "warmup": step < wcfg.run.warmup_steps,
            }
        )
    return out


def finalize_run(
    run_dir: Path, wcfg: Job, command: list[str], topology: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write the workload, the run-level step metrics and the topology into ``run.json``."""
    manifest = merge_manifest(run_dir)
    topology = topology or {"nodes": 1, "link": None, "intra_node": "loopback"}
    extra = {
        "workload": wcfg.to_dict(),
        "steps_metrics": run_step_metrics(manifest, wcfg),
        "command": command,
        "topology": topology,
        "link": topology.get("link"),
    }
    return merge_manifest(run_dir, extra)


@dataclass
class RunSummary:
    """What ``commlens run`` prints: the measured steps at a glance."""

    steps: int
    step_s: float
    comm_s: float
    comm_share: float
    exposed_share: float
    first_loss: float | None
    last_loss: float | None
    tokens_per_s: float
    tflops_per_rank: float
    top_ops: pa.Table
    warnings: list[str]


TOP_OPS_SCHEMA = pa.schema(
    [
        ("op", pa.string()),
        ("role", pa.string()),
        ("group_size", pa.int64()),
        ("calls_per_step", pa.float64()),
        ("avg_size_bytes", pa.float64()),
        ("time_per_step_s", pa.float64()),
        ("share", pa.float64()),
    ]
)


def _top_ops(calls: pa.Table, parts: list[dict[str, Any]], cells: int, top: int) -> pa.Table:
    """The ``top`` ops by their part of the communication (:func:`op_parts`): per rank and
    step, its part in seconds and its share of the step, with its calls and sizes."""
    by_key = {(r["op"], r["role"]): r for r in calls.to_pylist()}
    rows = []
    for part in parts[:top]:
        row = by_key.get((part["op"], part["role"]), {})
        rows.append(
            {
                "op": part["op"],
                "role": part["role"],
                "group_size": row.get("group_size"),
                "calls_per_step": row.get("calls_per_step"),
                "avg_size_bytes": row.get("avg_size_bytes"),
                "time_per_step_s": part["part_s"] / max(cells, 1),
                "share": part["share"],
            }
        )
    return pa.Table.from_pylist(rows, schema=TOP_OPS_SCHEMA)


def summarize(run_dir: Path, manifest: dict[str, Any], wcfg: Job, top: int = 8) -> RunSummary:
    """Summary of the steps after warm-up (all steps when there are no others)."""
    view = open_run(run_dir)
    try:
        first = wcfg.run.warmup_steps
        per_step = step_summary(step_table(view)).to_pylist()
        measured = [r for r in per_step if first <= r["step"] < wcfg.run.steps] or per_step
        metrics = [m for m in manifest.get("steps_metrics", []) if not m["warmup"]]
        metrics = metrics or manifest.get("steps_metrics", [])
        n = max(len(metrics), 1)
        step_s = sum(m["time_s"] for m in metrics) / n
        ranks = max(view.world_size, 1)
        calls = view.sql(
            """
            SELECT op, coalesce(role, '') AS role, any_value(group_size) AS group_size,
                   count(*) / ? AS calls_per_step, avg(size_bytes) AS avg_size_bytes
            FROM events WHERE step >= ? AND step < ?
            GROUP BY op, coalesce(role, '')
            """,
            [ranks * n, first, wcfg.run.steps],
        )
        parts = op_parts(view, first, wcfg.run.steps).to_pylist()
        ops = _top_ops(calls, parts, ranks * n, top)
        losses = [m["loss"] for m in manifest.get("steps_metrics", []) if m["loss"] is not None]
        k = max(len(measured), 1)
        return RunSummary(
            steps=len(metrics),
            step_s=step_s,
            comm_s=sum(r["comm_s"] for r in measured) / k,
            comm_share=sum(r["comm_share"] for r in measured) / k,
            exposed_share=sum(r["exposed_share"] for r in measured) / k,
            first_loss=losses[0] if losses else None,
            last_loss=losses[-1] if losses else None,
            tokens_per_s=sum(m["tokens_per_s"] for m in metrics) / n,
            tflops_per_rank=sum(m["tflops"] for m in metrics) / n,
            top_ops=ops,
            warnings=list(view.warnings),
        )
    finally:
        view.close()
