"""Per-op tables: what each (op, process group) cost, over all ranks.

``op_table`` is the contract of ``commlens report --format json`` ("ops"):
one row per (op, process group, role) with how many ranks issued it, calls
summed over those ranks, bytes (sum of S), total time, mean latency, algbw
and busbw. ``op_size_table`` splits the same rows by log2 message-size
bucket and adds wire volume under both conventions and latency percentiles.
"""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.bandwidth import factor_sql
from commlens.analysis.source import RunView

# Lower bound of the log2 bucket holding size_bytes (0 for empty messages).
BUCKET_SQL = (
    "CASE WHEN size_bytes <= 0 THEN 0::BIGINT "
    "ELSE (1::BIGINT << CAST(floor(log2(size_bytes)) AS INTEGER)) END"
)

_GROUP = "op, pg_name, pg_ranks, group_size, role"


def op_table(run: RunView) -> pa.Table:
    """One row per (op, process group, role), largest total time first."""
    return run.sql(
        f"""
        SELECT op, pg_name, pg_ranks, any_value(group_size) AS group_size, role,
               count(DISTINCT rank)::BIGINT AS ranks,
               count(*)::BIGINT AS count,
               coalesce(sum(size_bytes), 0)::BIGINT AS bytes,
               coalesce(sum(duration_s), 0.0) AS time_s,
               coalesce(avg(duration_s), 0.0) AS avg_latency_s,
               CASE WHEN sum(duration_s) > 0
                    THEN sum(size_bytes) / sum(duration_s) / 1e9 ELSE 0.0 END AS algbw_GBps,
               CASE WHEN sum(duration_s) > 0
                    THEN sum(size_bytes) / sum(duration_s) / 1e9 * any_value({factor_sql()})
                    ELSE 0.0 END AS busbw_GBps
        FROM events
        GROUP BY op, pg_name, pg_ranks, group_size, role
        ORDER BY time_s DESC, op, pg_name, role
        """
    )


def op_size_table(run: RunView) -> pa.Table:
    """One row per (op, group, role, log2 size bucket): the tidy CSV table."""
    return run.sql(
        f"""
        SELECT op, pg_name, pg_ranks, group_size, role,
               {BUCKET_SQL} AS size_bucket_bytes,
               count(DISTINCT rank)::BIGINT AS ranks,
               count(*)::BIGINT AS count,
               coalesce(sum(size_bytes), 0)::BIGINT AS bytes,
               coalesce(sum(size_bytes * {factor_sql()}), 0.0) AS wire_bytes_ring,
               coalesce(sum(size_bytes * {factor_sql(convention="study_b")}), 0.0)
                   AS wire_bytes_study_b,
               coalesce(sum(duration_s), 0.0) AS time_s,
               coalesce(avg(duration_s), 0.0) AS mean_s,
               coalesce(quantile_cont(duration_s, 0.5), 0.0) AS p50_s,
               coalesce(quantile_cont(duration_s, 0.99), 0.0) AS p99_s,
               CASE WHEN sum(duration_s) > 0
                    THEN sum(size_bytes) / sum(duration_s) / 1e9 ELSE 0.0 END AS algbw_GBps,
               CASE WHEN sum(duration_s) > 0
                    THEN sum(size_bytes) / sum(duration_s) / 1e9 * any_value({factor_sql()})
                    ELSE 0.0 END AS busbw_GBps
        FROM events
        GROUP BY {_GROUP}, size_bucket_bytes
        ORDER BY op, pg_name, role, size_bucket_bytes
        """
    )


def size_histogram(run: RunView) -> pa.Table:
    """Message sizes in log2 buckets per op, by call count and by volume."""
    return run.sql(
        f"""
        SELECT op, {BUCKET_SQL} AS size_bucket_bytes,
               count(*)::BIGINT AS count,
               coalesce(sum(size_bytes), 0)::BIGINT AS bytes
        FROM events
        GROUP BY op, size_bucket_bytes
        ORDER BY op, size_bucket_bytes
        """
    )
