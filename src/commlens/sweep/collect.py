"""What the catalog keeps of one finished point: its figures, ops, sizes, checks.

All figures are over the measured steps (after warm-up), per step:

- ``step_s``: median over steps of the slowest rank's step time; ``step_min_s``
  the best of them (the least disturbed by other work on a shared machine);
- ``comm_share`` / ``exposed_share``: mean over ranks and steps (analysis.steps);
- per (op, role): calls and bytes (nccl-tests S) per rank (the busiest rank),
  wire bytes per rank under the ring convention and Study B's, the time in its
  calls per rank and step (mean over the ranks that issue it), split for
  collectives into transfer and waiting for the last peer to arrive, and its
  share of the step: its part of all ranks' communication over their step
  windows (:mod:`commlens.analysis.opshare`: the shares of any ops add up to at
  most the communication share), ``transfer_share`` the part of that share in
  the ratio of its transfer to its time;
- ``peak_link_gbit_s``: the highest NIC sample (tx of any node) of an emulated
  run, else None.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.analysis import (
    RankPass,
    matched_events,
    rank_pass,
    step_summary,
    step_table,
    utilization_summary,
)
from commlens.analysis.bandwidth import factor_sql
from commlens.analysis.opshare import op_parts
from commlens.analysis.rankagg import BUCKET_SQL
from commlens.trace.reader import open_run


@dataclass
class PointResult:
    """Everything measured and checked of one point (JSON-able via ``to_dict``)."""

    metrics: dict[str, Any]
    ops: list[dict[str, Any]] = field(default_factory=list)
    sizes: list[dict[str, Any]] = field(default_factory=list)
    predictions: list[dict[str, Any]] = field(default_factory=list)
    validation: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "ops": self.ops,
            "sizes": self.sizes,
            "predictions": self.predictions,
            "validation": self.validation,
        }


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def step_metrics(manifest: dict[str, Any]) -> dict[str, float]:
    """Step time, throughput and TFLOP/s per rank from the manifest's step records."""
    records = manifest.get("steps_metrics") or []
    measured = [m for m in records if not m.get("warmup")] or records
    return {
        "steps": float(len(measured)),
        "step_s": _median([float(m["time_s"]) for m in measured]),
        "step_mean_s": statistics.fmean([float(m["time_s"]) for m in measured]) if measured else 0,
        "step_min_s": min((float(m["time_s"]) for m in measured), default=0.0),
        "tokens_per_s": _median([float(m["tokens_per_s"]) for m in measured]),
        "tflops_per_rank": _median([float(m["tflops"]) for m in measured]),
    }


def _op_rows(view: Any, first: int, last: int, steps: int) -> list[dict[str, Any]]:
    rows = view.sql(
        f"""
        WITH per_rank AS (
            SELECT op, role, rank, any_value(group_size) AS group_size, count(*) AS calls,
                   sum(size_bytes) AS bytes,
                   sum(size_bytes * {factor_sql(convention="ring")}) AS wire,
                   sum(size_bytes * {factor_sql(convention="study_b")}) AS wire_b,
                   sum(duration_s) AS time_s
            FROM events WHERE step >= {first} AND step <= {last}
            GROUP BY op, role, rank
        )
        SELECT op, role, max(group_size) AS group_size, count(*) AS ranks,
               max(calls) AS calls, sum(calls) AS calls_all, max(bytes) AS bytes,
               sum(bytes) AS bytes_all, max(wire) AS wire, max(wire_b) AS wire_b,
               avg(time_s) AS time_s
        FROM per_rank GROUP BY op, role ORDER BY op, role
        """
    ).to_pylist()
    n = max(steps, 1)
    shares = {(p["op"], p["role"]): p["share"] for p in op_parts(view, first, last + 1).to_pylist()}
    out = []
    for r in rows:
        time_s = float(r["time_s"] or 0.0) / n
        out.append(
            {
                "op": r["op"],
                "role": r["role"] or "",
                "group_size": int(r["group_size"] or 0),
                "ranks": int(r["ranks"]),
                "calls_per_rank_step": float(r["calls"]) / n,
                "calls_per_step": float(r["calls_all"]) / n,
                "bytes_per_rank_step": float(r["bytes"] or 0) / n,
                "bytes_per_step": float(r["bytes_all"] or 0) / n,
                "wire_bytes_per_rank_step": float(r["wire"] or 0) / n,
                "wire_bytes_study_b_per_rank_step": float(r["wire_b"] or 0) / n,
                "time_per_step_s": time_s,
                "share_of_step": shares.get((r["op"], r["role"] or ""), 0.0),
            }
        )
    return out


def _add_transfer(rp: RankPass, ops: list[dict[str, Any]], first: int, last: int, n: int) -> None:
    """Split each collective's time into transfer and wait for the last peer
    (analysis.skew), mean over the ranks that issue it; p2p ops are not matched."""
    try:
        matched = matched_events(rp).to_pylist()
    except Exception:  # no matchable collective: leave the split out
        return
    totals: dict[tuple[str, str], list[float]] = {}
    ranks: dict[tuple[str, str], set[int]] = {}
    for e in matched:
        if first <= e["step"] <= last:
            key = (e["op"], e["role"] or "")
            acc = totals.setdefault(key, [0.0, 0.0])
            acc[0] += float(e["transfer_s"])
            acc[1] += float(e["wait_last_s"])
            ranks.setdefault(key, set()).add(int(e["rank"]))
    for row in ops:
        key = (row["op"], row["role"])
        if key in totals:
            k = max(len(ranks[key]), 1) * max(n, 1)
            row["transfer_per_step_s"] = totals[key][0] / k
            row["wait_per_step_s"] = totals[key][1] / k
            # the op's share of the step, in the ratio of its transfer to its time
            part = (
                row["transfer_per_step_s"] / row["time_per_step_s"] if row["time_per_step_s"] else 0
            )
            row["transfer_share"] = row["share_of_step"] * min(max(part, 0.0), 1.0)


def _size_rows(view: Any, first: int, last: int) -> list[dict[str, Any]]:
    return [
        {
            "op": r["op"],
            "size_bucket_bytes": int(r["b"]),
            "count": int(r["n"]),
            "bytes": int(r["bytes"] or 0),
        }
        for r in view.sql(
            f"""
            SELECT op, {BUCKET_SQL} AS b, count(*) AS n, sum(size_bytes) AS bytes
            FROM events WHERE step >= {first} AND step <= {last}
            GROUP BY op, b ORDER BY op, b
            """
        ).to_pylist()
    ]


def collect(
    run_dir: Path,
    tolerance: float,
    networks: list[str],
    nodes: int = 1,
    link: str | None = None,
) -> PointResult:
    """Measure a finished run; validate and predict it when its manifest allows."""
    view = open_run(run_dir)
    try:
        manifest = view.manifest
        workload = manifest.get("workload") or {}
        steps_total = int(workload.get("steps", 0)) or 1
        first = int(workload.get("warmup_steps", 0))
        if first >= steps_total:
            first = 0
        sm = step_metrics(manifest)
        rp = rank_pass(view, util_bins=100, match=True, nic=True)
        summary = step_summary(step_table(rp)).to_pylist()
        per_step = [r for r in summary if first <= r["step"] < steps_total]
        k = max(len(per_step), 1)
        metrics: dict[str, Any] = dict(sm)
        metrics["comm_s"] = sum(r["comm_s"] for r in per_step) / k
        metrics["comm_share"] = sum(r["comm_share"] for r in per_step) / k
        metrics["exposed_share"] = sum(r["exposed_share"] for r in per_step) / k
        n_steps = steps_total - first
        ops = _op_rows(view, first, steps_total - 1, n_steps)
        _add_transfer(rp, ops, first, steps_total - 1, n_steps)
        metrics["bytes_per_rank_step"] = sum(o["bytes_per_rank_step"] for o in ops)
        metrics["bytes_per_step"] = sum(o["bytes_per_step"] for o in ops)
        metrics["wire_bytes_per_rank_step"] = sum(o["wire_bytes_per_rank_step"] for o in ops)
        metrics["calls_per_rank_step"] = sum(o["calls_per_rank_step"] for o in ops)
        util = utilization_summary(rp).to_pylist()
        nic = [u for u in util if u["source"] == "nic tx"]
        metrics["peak_link_gbit_s"] = max((u["peak_gbit_s"] for u in nic), default=None)
        metrics["mean_link_gbit_s"] = max((u["mean_gbit_s"] for u in nic), default=None)
        sizes = _size_rows(view, first, steps_total - 1)
        warnings = list(view.warnings)
    finally:
        view.close()
    metrics["warnings"] = "; ".join(warnings)
    result = PointResult(metrics=metrics, ops=ops, sizes=sizes)
    if workload:
        from commlens.sweep.check import predict_point, validate_point

        result.validation = validate_point(run_dir, tolerance)
        result.predictions = predict_point(manifest, networks, sm["tflops_per_rank"], nodes, link)
    return result
