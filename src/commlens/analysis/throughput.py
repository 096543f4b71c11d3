"""Training throughput per rank and step, when the run's manifest carries it.

Sources, first found wins per value:

1. per-step records a workload wrote with ``commlens.add_meta``, in
   ``ranks[r].meta.steps_metrics`` (what ``commlens run`` writes; also
   ``step_metrics``): dicts with ``step`` and any of ``tokens_per_s``,
   ``tflops`` (TFLOP/s of this rank), ``tokens``, ``flops``, ``loss``,
   ``time_s``, ``warmup``;
2. per-step amounts (``tokens``, ``flops``) divided by the step's wall time;
3. per-step constants: ``meta.tokens_per_step`` / ``meta.flops_per_step`` of
   the rank, else ``workload.tokens_per_step`` / ``workload.flops_per_step``
   of the run divided over its ranks (conventions §2 model FLOPs).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from commlens.analysis.rankpass import Source, rank_pass
from commlens.analysis.sql import query

_COLUMNS = ("rank", "step", "warmup", "step_s", "tokens_per_s", "tflops", "loss")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _per_step_records(meta: dict[str, Any]) -> dict[int, dict[str, Any]]:
    records = meta.get("steps_metrics", meta.get("step_metrics"))
    out: dict[int, dict[str, Any]] = {}
    if isinstance(records, list):
        for rec in records:
            if isinstance(rec, dict) and isinstance(rec.get("step"), int):
                out[int(rec["step"])] = rec
    return out


def throughput_table(run: Source) -> pa.Table:
    """One row per (rank, step) with tokens/s, TFLOP/s and loss where known."""
    rp = rank_pass(run)
    manifest = rp.manifest
    raw = manifest.get("workload")
    workload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    world = max(1, rp.world_size)
    windows = rp.windows.select(["rank", "step", "duration_s"]).to_pylist()
    step_s = {(r["rank"], r["step"]): r["duration_s"] for r in windows}
    out: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    for key, rank_meta in sorted(manifest.get("ranks", {}).items(), key=lambda kv: int(kv[0])):
        rank = int(key)
        meta = rank_meta.get("meta") or {}
        records = _per_step_records(meta)
        tokens_const = _num(meta.get("tokens_per_step"))
        flops_const = _num(meta.get("flops_per_step"))
        if tokens_const is None and _num(workload.get("tokens_per_step")) is not None:
            tokens_const = float(workload["tokens_per_step"]) / world
        if flops_const is None and _num(workload.get("flops_per_step")) is not None:
            flops_const = float(workload["flops_per_step"]) / world
        step_ids = sorted({s for (r, s) in step_s if r == rank} | set(records))
        if rp.step_range is not None:  # the same step range as the events
            first, stop = rp.step_range
            step_ids = [
                s for s in step_ids if (first is None or s >= first) and (stop is None or s < stop)
            ]
        for step in step_ids:
            rec = records.get(step, {})
            seconds = step_s.get((rank, step)) or _num(rec.get("time_s"))
            tokens = _num(rec.get("tokens")) or tokens_const
            flops = _num(rec.get("flops")) or flops_const
            tps = _num(rec.get("tokens_per_s"))
            if tps is None and tokens is not None and seconds:
                tps = tokens / seconds
            tflops = _num(rec.get("tflops"))
            if tflops is None and flops is not None and seconds:
                tflops = flops / seconds / 1e12
            loss = _num(rec.get("loss"))
            if tps is None and tflops is None and loss is None:
                continue
            warmup = bool(rec.get("warmup", False))
            values = (rank, step, warmup, seconds, tps, tflops, loss)
            for col, value in zip(_COLUMNS, values, strict=True):
                out[col].append(value)
    return pa.table(
        {
            "rank": pa.array(out["rank"], pa.int32()),
            "step": pa.array(out["step"], pa.int32()),
            "warmup": pa.array(out["warmup"], pa.bool_()),
            **{c: pa.array(out[c], pa.float64()) for c in _COLUMNS[3:]},
        }
    )


def throughput_summary(table: pa.Table) -> pa.Table:
    """Per rank: mean tokens/s and TFLOP/s over its steps, leaving out warm-up steps
    (those flagged ``warmup``, else the first step) when there are others."""
    return query(
        """
        WITH ranked AS (
            SELECT *, count(*) OVER (PARTITION BY rank) AS n,
                   row_number() OVER (PARTITION BY rank ORDER BY step) AS i,
                   bool_or(warmup) OVER (PARTITION BY rank) AS flagged,
                   count(*) FILTER (WHERE NOT warmup) OVER (PARTITION BY rank) AS n_measured
            FROM t
        )
        SELECT rank, count(*)::BIGINT AS steps, avg(step_s) AS step_s,
               avg(tokens_per_s) AS tokens_per_s, avg(tflops) AS tflops,
               arg_max(loss, step) AS last_loss
        FROM ranked
        WHERE CASE WHEN flagged AND n_measured > 0 THEN NOT warmup ELSE n = 1 OR i > 1 END
        GROUP BY rank ORDER BY rank
        """,
        t=table,
    )
