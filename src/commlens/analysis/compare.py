"""Several runs side by side: step time, comm share, per-op volume and time.

The typical step of a run is the median over steps of the slowest rank's
step time, leaving out the first step (warm-up, bucket rebuild) when there
are more. Speedups are relative to the first run: ``t_first / t_run``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from commlens.analysis.ops import op_table
from commlens.analysis.rankpass import RankPass, Source, rank_pass
from commlens.analysis.sql import query
from commlens.analysis.steps import step_table


def run_labels(runs: Sequence[RankPass]) -> list[str]:
    """Short unique names: the directory names, numbered where they repeat."""
    names = [r.name for r in runs]
    return [n if names.count(n) == 1 else f"{i}:{n}" for i, n in enumerate(names)]


def _summary(run: RankPass, label: str) -> dict[str, object]:
    row = query(
        """
        WITH per_step AS (
            SELECT step, max(step_s) AS step_s, avg(comm_s) AS comm_s,
                   avg(exposed_s) AS exposed_s, sum(bytes) AS bytes, sum(ops) AS ops
            FROM per_rank GROUP BY step
        ), kept AS (
            SELECT * FROM per_step
            WHERE (SELECT count(*) FROM per_step) = 1 OR step > (SELECT min(step) FROM per_step)
        )
        SELECT count(*) AS steps, median(step_s) AS step_s, median(comm_s) AS comm_s,
               median(exposed_s) AS exposed_s, avg(bytes) AS bytes, avg(ops) AS ops FROM kept
        """,
        per_rank=step_table(run),
    ).to_pylist()[0]
    steps = row["steps"]
    step_s, comm_s, exposed_s, bytes_, ops = (
        row[k] or 0.0 for k in ("step_s", "comm_s", "exposed_s", "bytes", "ops")
    )
    return {
        "run": label,
        "path": str(run.path),
        "world_size": run.world_size,
        "steps": int(steps),
        "step_s": float(step_s),
        "comm_s": float(comm_s),
        "comm_share": float(comm_s) / step_s if step_s else 0.0,
        "exposed_s": float(exposed_s),
        "exposed_share": float(exposed_s) / step_s if step_s else 0.0,
        "bytes_per_step": float(bytes_),
        "ops_per_step": float(ops),
    }


def compare_summary(runs: Sequence[Source]) -> pa.Table:
    """One row per run with its typical step, comm share and speedup vs the first."""
    passes = [rank_pass(r) for r in runs]
    rows = [_summary(r, label) for r, label in zip(passes, run_labels(passes), strict=True)]
    base = rows[0]["step_s"] if rows else 0.0
    for row in rows:  # no speedup where either run has no timed step
        step = row["step_s"]
        assert isinstance(step, float) and isinstance(base, float)
        row["speedup"] = base / step if step > 0 and base > 0 else None
    table = pa.Table.from_pylist(rows)
    index = table.schema.get_field_index("speedup")
    return table.set_column(index, "speedup", table.column(index).cast(pa.float64()))


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
