"""Per-op tables: what each (op, process group) cost, over all ranks.

``op_table`` is the contract of ``commlens report --format json`` ("ops"):
one row per (op, process group, role) with how many ranks issued it, calls
summed over those ranks, bytes (sum of S), total time, mean latency, algbw
and busbw. ``op_size_table`` splits the same rows by log2 message-size
bucket and adds wire volume under both conventions and latency percentiles.
Sums come from the per-rank aggregates of :mod:`commlens.analysis.rankpass`;
only the percentiles read the events again (in DuckDB).
"""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.bandwidth import factor_sql
from commlens.analysis.rankpass import ensure_pass
from commlens.analysis.source import RunView, accepts_run

# Lower bound of the log2 bucket holding size_bytes (0 for empty messages).
BUCKET_SQL = (
    "CASE WHEN size_bytes <= 0 THEN 0::BIGINT "
    "ELSE (1::BIGINT << CAST(floor(log2(size_bytes)) AS INTEGER)) END"
)


def register_aggregates(run: RunView) -> None:
    """Make the views ``agg`` (per rank x op x group x role x size x phase x module) and
    ``agg_groups`` (pg_name, group_size, pg_ranks) available on ``run.con``."""
    if "agg_registered" in run.cache:
        return
    rp = ensure_pass(run)
    run.con.register("agg_raw", rp.agg)
    run.con.register("agg_groups", rp.groups)
    run.con.execute(
        "CREATE OR REPLACE TEMP VIEW agg AS SELECT a.*, g.group_size, g.pg_ranks "
        "FROM agg_raw a LEFT JOIN agg_groups g USING (pg_name)"
    )
    run.cache["agg_registered"] = True


_BW = f"""
    CASE WHEN sum(time_s) > 0 THEN sum(bytes) / sum(time_s) / 1e9 ELSE 0.0 END AS algbw_GBps,
    CASE WHEN sum(time_s) > 0
         THEN sum(bytes) / sum(time_s) / 1e9 * any_value({factor_sql()}) ELSE 0.0 END
         AS busbw_GBps
"""


@accepts_run
def op_table(run: RunView) -> pa.Table:
    """One row per (op, process group, role), largest total time first."""
    register_aggregates(run)
    return run.sql(
        f"""
        SELECT op, pg_name, any_value(pg_ranks) AS pg_ranks,
               any_value(group_size) AS group_size, role,
               count(DISTINCT rank)::BIGINT AS ranks, sum(count)::BIGINT AS count,
               sum(bytes)::BIGINT AS bytes, sum(time_s) AS time_s,
               sum(time_s) / sum(count) AS avg_latency_s, {_BW}
        FROM agg GROUP BY op, pg_name, role
        ORDER BY time_s DESC, op, pg_name, role
        """
    )


@accepts_run
def op_size_table(run: RunView) -> pa.Table:
    """One row per (op, group, role, log2 size bucket): the tidy CSV table."""
    register_aggregates(run)
    if "quantiles" not in run.cache:
        run.cache["quantiles"] = run.sql(
            f"""
            SELECT op, pg_name, role, {BUCKET_SQL} AS size_bucket_bytes,
                   quantile_cont(duration_s, [0.5, 0.99]) AS q
            FROM events GROUP BY ALL
            """
        )
    run.con.register("agg_quantiles", run.cache["quantiles"])
    return run.sql(
        f"""
        WITH sums AS (
            SELECT op, pg_name, any_value(pg_ranks) AS pg_ranks,
                   any_value(group_size) AS group_size, role, size_bucket_bytes,
                   count(DISTINCT rank)::BIGINT AS ranks, sum(count)::BIGINT AS count,
                   sum(bytes)::BIGINT AS bytes,
                   sum(bytes * {factor_sql()})::DOUBLE AS wire_bytes_ring,
                   sum(bytes * {factor_sql(convention="study_b")})::DOUBLE AS wire_bytes_study_b,
                   sum(time_s) AS time_s, sum(time_s) / sum(count) AS mean_s, {_BW}
            FROM agg GROUP BY op, pg_name, role, size_bucket_bytes
        )
        SELECT s.op, s.pg_name, s.pg_ranks, s.group_size, s.role, s.size_bucket_bytes,
               s.ranks, s.count, s.bytes, s.wire_bytes_ring, s.wire_bytes_study_b, s.time_s,
               s.mean_s, coalesce(q.q[1], 0.0) AS p50_s, coalesce(q.q[2], 0.0) AS p99_s,
               s.algbw_GBps, s.busbw_GBps
        FROM sums s LEFT JOIN agg_quantiles q USING (op, pg_name, role, size_bucket_bytes)
        ORDER BY s.op, s.pg_name, s.role, s.size_bucket_bytes
        """
    )


@accepts_run
def size_histogram(run: RunView) -> pa.Table:
    """Message sizes in log2 buckets per op, by call count and by volume."""
    register_aggregates(run)
    return run.sql(
        """
        SELECT op, size_bucket_bytes, sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes
        FROM agg GROUP BY op, size_bucket_bytes ORDER BY op, size_bucket_bytes
        """
    )
