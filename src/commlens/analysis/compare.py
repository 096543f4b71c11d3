"""Several runs side by side: step time, comm share, per-op volume and time.

The typical step of a run is the median over steps of the slowest rank's
step time, leaving out the first step (warm-up, bucket rebuild) when there
are more. Speedups are relative to the first run: ``t_first / t_run``.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from commlens.analysis.ops import op_table
from commlens.analysis.source import RunView
from commlens.analysis.steps import step_table


def run_labels(runs: Sequence[RunView]) -> list[str]:
    """Short unique names: the directory names, numbered where they repeat."""
    names = [r.name for r in runs]
    return [n if names.count(n) == 1 else f"{i}:{n}" for i, n in enumerate(names)]


def _summary(run: RunView, label: str) -> dict[str, object]:
    con = duckdb.connect()
    con.register("per_rank", step_table(run))
    row = con.execute(
        """
        WITH per_step AS (
            SELECT step, max(step_s) AS step_s, avg(comm_s) AS comm_s,
                   avg(exposed_s) AS exposed_s, sum(bytes) AS bytes, sum(ops) AS ops
            FROM per_rank GROUP BY step
        ), kept AS (
            SELECT * FROM per_step
            WHERE (SELECT count(*) FROM per_step) = 1 OR step > (SELECT min(step) FROM per_step)
        )
        SELECT count(*), median(step_s), median(comm_s), median(exposed_s),
               avg(bytes), avg(ops) FROM kept
        """
    ).fetchall()[0]
    steps, step_s, comm_s, exposed_s, bytes_, ops = (
        row[0],
        row[1] or 0.0,
        row[2] or 0.0,
        row[3] or 0.0,
        row[4] or 0.0,
        row[5] or 0.0,
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


def compare_summary(runs: Sequence[RunView]) -> pa.Table:
    """One row per run with its typical step, comm share and speedup vs the first."""
    rows = [_summary(r, label) for r, label in zip(runs, run_labels(runs), strict=True)]
    base = rows[0]["step_s"] if rows else 0.0
    for row in rows:  # no speedup where either run has no timed step
        step = row["step_s"]
        assert isinstance(step, float) and isinstance(base, float)
        row["speedup"] = base / step if step > 0 and base > 0 else None
    table = pa.Table.from_pylist(rows)
    index = table.schema.get_field_index("speedup")
    return table.set_column(index, "speedup", table.column(index).cast(pa.float64()))


def compare_ops(runs: Sequence[RunView]) -> pa.Table:
    """Long table: one row per (run, op, role) with count, bytes, time and the
    time relative to the same op in the first run."""
    tables = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        t = op_table(run)
        tables.append(t.append_column("run", pa.array([label] * t.num_rows, pa.string())))
    con = duckdb.connect()
    con.register("all_ops", pa.concat_tables(tables, promote_options="default"))
    order = {label: i for i, label in enumerate(run_labels(runs))}
    con.register("run_order", pa.table({"run": list(order), "i": list(order.values())}))
    return con.sql(
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
        """
    ).to_arrow_table()
