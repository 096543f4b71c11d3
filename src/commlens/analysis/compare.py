"""Several runs side by side: step time, comm share, per-op volume and time.

The typical step of a run is :func:`commlens.analysis.typical.typical_step`'s
(the median over the measured steps of the slowest rank's step; ``commlens
run``'s summary quotes the same). Speedups are relative to the
first run and compare like with like: time per token when every run's
manifest gives its tokens per step, else time per sample when each gives its
samples per step (:func:`work_per_step`), else time per step, with
``speedup_basis`` saying so ("step (work unknown)").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from commlens.analysis.ops import op_table
from commlens.analysis.rankpass import RankPass, Source, rank_pass
from commlens.analysis.sql import query
from commlens.analysis.typical import typical_step


def run_labels(runs: Sequence[RankPass]) -> list[str]:
    """Short unique names: the directory names, numbered where they repeat."""
    names = [r.name for r in runs]
    return [n if names.count(n) == 1 else f"{i}:{n}" for i, n in enumerate(names)]


def _positive(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def work_per_step(manifest: dict[str, Any]) -> dict[str, float | None]:
    """Tokens and samples one step of the whole job processes, from the manifest's
    ``workload``: ``tokens_per_step`` / ``samples_per_step`` (or ``global_batch``) as
    given, else micro_batch x microbatches x dp (x seq_len for tokens); None: unknown."""
    w = manifest.get("workload")
    w = w if isinstance(w, dict) else {}
    dims: dict[str, Any] = w["dims"] if isinstance(w.get("dims"), dict) else {}
    samples = _positive(w.get("samples_per_step")) or _positive(w.get("global_batch"))
    if samples is None:
        parts = [_positive(w.get(k)) for k in ("micro_batch", "microbatches")]
        dp = _positive(dims.get("dp", w.get("dp", 1)))
        if all(p is not None for p in parts) and dp is not None:
            samples = float(parts[0] or 0) * float(parts[1] or 0) * dp
    tokens = _positive(w.get("tokens_per_step"))
    seq = _positive(w.get("seq_len"))
    if tokens is None and samples is not None and seq is not None:
        tokens = samples * seq
    return {"tokens_per_step": tokens, "samples_per_step": samples}


def _summary(run: RankPass, label: str) -> dict[str, Any]:
    typical = typical_step(run)
    return {
        "run": label,
        "path": str(run.path),
        "world_size": run.world_size,
        "steps": len(typical.steps),
        "step_s": typical.step_s,
        "comm_s": typical.comm_s,
        "comm_share": typical.comm_share,
        "exposed_s": typical.exposed_s,
        "exposed_share": typical.exposed_share,
        "bytes_per_step": typical.bytes,
        "ops_per_step": typical.ops,
        **work_per_step(run.manifest),
    }


def _basis(rows: list[dict[str, Any]]) -> tuple[str | None, str]:
    """The work unit every run knows (tokens, then samples), and the basis in words."""
    for key, unit in (("tokens_per_step", "token"), ("samples_per_step", "sample")):
        if rows and all(r[key] is not None for r in rows):
            return key, unit
    return None, "step (work unknown)"


def compare_summary(runs: Sequence[Source]) -> pa.Table:
    """One row per run with its typical step, comm share, time per unit of work and
    speedup vs the first (on ``speedup_basis``: per token, per sample, or per step)."""
    passes = [rank_pass(r) for r in runs]
    rows = [_summary(r, label) for r, label in zip(passes, run_labels(passes), strict=True)]
    key, basis = _basis(rows)
    for row in rows:
        work = float(row[key]) if key is not None else 1.0
        row["time_per_unit_s"] = float(row["step_s"]) / work if row["step_s"] else None
        row["speedup_basis"] = basis
    base: float | None = rows[0]["time_per_unit_s"] if rows else None
    for row in rows:  # no speedup where either run has no timed step
        unit_s: float | None = row["time_per_unit_s"]
        row["speedup"] = base / unit_s if base and unit_s else None
    table = pa.Table.from_pylist(rows)
    for name in ("speedup", "time_per_unit_s", "tokens_per_step", "samples_per_step"):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, table.column(index).cast(pa.float64()))
    return table


def work_note(summary: pa.Table) -> str:
    """What the speedups compare, in words; plain about unknown or different work."""
    if not summary.num_rows:
        return ""
    basis = summary.column("speedup_basis")[0].as_py()
    if basis == "step (work unknown)":
        return (
            "speedup = step-time ratio: the manifests do not say how many tokens or samples "
            "every run processed per step, so the runs may have done different amounts of work."
        )
    key = "tokens_per_step" if basis == "token" else "samples_per_step"
    amounts = set(summary.column(key).to_pylist())
    same = "the same" if len(amounts) == 1 else "different"
    return f"speedup = ratio of time per {basis} (the runs processed {same} {basis}s per step)."


def compare_ops(runs: Sequence[Source]) -> pa.Table:
    """Long table: one row per (run, op, role) with count, bytes, time and the
    time relative to the same op in the first run."""
    passes = [rank_pass(r) for r in runs]
    labels = run_labels(passes)
    tables = []
    for run, label in zip(passes, labels, strict=True):
        t = op_table(run)
        tables.append(t.append_column("run", pa.array([label] * t.num_rows, pa.string())))
    order = {label: i for i, label in enumerate(labels)}
    return query(
        """
        WITH per AS (
            SELECT run, op, role, sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes,
                   sum(time_s) AS time_s,
                   CASE WHEN sum(time_s) > 0 THEN sum(busbw_GBps * time_s) / sum(time_s)
                        ELSE 0.0 END AS busbw_GBps
            FROM all_ops GROUP BY run, op, role
        ), base AS (
            SELECT op, role, time_s AS base_time_s FROM per
            WHERE run = (SELECT run FROM run_order WHERE i = 0)
        )
        SELECT p.run, p.op, p.role, p.count, p.bytes, p.time_s, p.busbw_GBps,
               CASE WHEN p.time_s > 0 AND b.base_time_s IS NOT NULL
                    THEN b.base_time_s / p.time_s END AS speedup
        FROM per p JOIN run_order o USING (run) LEFT JOIN base b USING (op, role)
        ORDER BY p.op, p.role, o.i
        """,
        all_ops=pa.concat_tables(tables, promote_options="default"),
        run_order=pa.table({"run": list(order), "i": list(order.values())}),
    )
