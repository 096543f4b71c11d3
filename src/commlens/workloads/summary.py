"""After a run: run-level step metrics in the manifest, and the one-screen summary.

Each rank stored its own step records (``meta.steps_metrics``); the run-level
record of a step takes the slowest rank's time and the loss of the rank
``commlens run`` prints line by line (:attr:`commlens.job.spec.Job.loss_rank`),
named in it. The summary's step, communication and throughput are the run's
typical step (:func:`commlens.analysis.typical.typical_step`, the figure
``commlens compare`` shows), from the captured events; its loss is the same
rank's as the lines above it, from the first step to the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.analysis import open_run
from commlens.analysis.opshare import op_parts
from commlens.analysis.typical import typical_step
from commlens.job.spec import Job
from commlens.trace.manifest import merge_manifest


def run_step_metrics(manifest: dict[str, Any], wcfg: Job) -> list[dict[str, Any]]:
    """One record per step over all ranks (time: the slowest rank's; loss: the loss
    rank's, named in ``loss_rank``)."""
    per_rank = {
        int(rank): entry.get("meta", {}).get("steps_metrics") or []
        for rank, entry in manifest.get("ranks", {}).items()
    }
    quoted = per_rank.get(wcfg.loss_rank, [])
    out = []
    for step in range(wcfg.run.steps):
        rows = [recs[step] for recs in per_rank.values() if len(recs) > step]
        if not rows:
            break
        time_s = max(r["time_s"] for r in rows)
        out.append(
            {
                "step": step,
                "time_s": time_s,
                "loss": quoted[step]["loss"] if len(quoted) > step else None,
                "loss_rank": wcfg.loss_rank,
                "tokens_per_s": wcfg.global_batch * wcfg.seq_len / time_s,
                "tflops": sum(r["tflops"] for r in rows) / len(rows),
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
    """What ``commlens run`` prints: the run's typical step at a glance."""

    steps: int
    """Measured steps (warm-up left out), over which the figures are medians."""
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
    loss_rank: int = 0
    """The rank whose loss is quoted (the one whose steps ``run`` prints as they end)."""
    pooled_share: float = 0.0
    """The measured steps' communication share, all ranks taken together: what the top
    ops' shares add up to (``comm_share`` is the median step's)."""


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
    """The typical step of the run (:func:`typical_step`, as ``compare`` gives it), its top
    ops over the measured steps, and the loss rank's loss from the first step to the last."""
    view = open_run(run_dir)
    try:
        typical = typical_step(view)
        n = max(len(typical.steps), 1)
        first, stop = (typical.steps[0], typical.steps[-1] + 1) if typical.steps else (0, 0)
        ranks = max(view.world_size, 1)
        calls = view.sql(
            """
            SELECT op, coalesce(role, '') AS role, any_value(group_size) AS group_size,
                   count(*) / ? AS calls_per_step, avg(size_bytes) AS avg_size_bytes
            FROM events WHERE step >= ? AND step < ?
            GROUP BY op, coalesce(role, '')
            """,
            [ranks * n, first, stop],
        )
        parts = op_parts(view, first, stop).to_pylist()
        ops = _top_ops(calls, parts, ranks * n, top)
        records = manifest.get("ranks", {}).get(str(wcfg.loss_rank), {}).get("meta", {})
        losses = [r["loss"] for r in records.get("steps_metrics") or [] if r["loss"] is not None]
        step_s = typical.step_s
        return RunSummary(
            steps=len(typical.steps),
            step_s=step_s,
            comm_s=typical.comm_s,
            comm_share=typical.comm_share,
            exposed_share=typical.exposed_share,
            first_loss=losses[0] if losses else None,
            last_loss=losses[-1] if losses else None,
            tokens_per_s=wcfg.global_batch * wcfg.seq_len / step_s if step_s else 0.0,
            tflops_per_rank=wcfg.flops_per_rank / step_s / 1e12 if step_s else 0.0,
            top_ops=ops,
            warnings=list(view.warnings),
            loss_rank=wcfg.loss_rank,
            pooled_share=typical.pooled_share,
        )
    finally:
        view.close()
