"""Per-op tables: what each (op, process group) cost, over all ranks.

``op_table`` is the contract of ``commlens report --format json`` ("ops"):
one row per (op, process group, role) with how many ranks issued it, calls
summed over those ranks, bytes (sum of S), total time (latency, issue → end),
service time (time at the head of the group's queue: it adds up across async
ops queued on one group), queued time (latency − service), mean latency,
algbw and busbw. Bandwidths divide bytes by transfer time: for collectives
matched across ranks, service time less the wait for the last peer, over the
calls after each rank's first one of that op on that group (which carries
connection set-up); otherwise by service time. ``op_size_table`` splits the
same rows by log2 message-size bucket and adds wire volume under both
conventions and latency percentiles (bandwidths there over service time).
Sums come from the per-rank aggregates of the rank pass
(:mod:`commlens.analysis.rankpass`); the percentiles from its ``quantiles``.
"""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.bandwidth import factor_sql
from commlens.analysis.rankagg import BUCKET_SQL as BUCKET_SQL  # re-exported
from commlens.analysis.rankpass import RankPass, Source, rank_pass
from commlens.analysis.sql import query


def over_aggregates(rp: RankPass, sql: str, **tables: pa.Table) -> pa.Table:
    """``sql`` over ``agg``: the pass's per-rank aggregates (per rank x op x group x role x
    size x phase x module) with each group's ``group_size`` and ``pg_ranks``."""
    return query(
        "WITH agg AS (SELECT a.*, g.group_size, g.pg_ranks "
        f"FROM agg_raw a LEFT JOIN agg_groups g USING (pg_name)) {sql}",
        agg_raw=rp.agg,
        agg_groups=rp.groups,
        **tables,
    )


_BW = f"""
    CASE WHEN sum(service_s) > 0 THEN sum(bytes) / sum(service_s) / 1e9 ELSE 0.0 END
         AS algbw_GBps,
    CASE WHEN sum(service_s) > 0
         THEN sum(bytes) / sum(service_s) / 1e9 * any_value({factor_sql()}) ELSE 0.0 END
         AS busbw_GBps
"""
"""Bandwidths over service time (no matching needed): the per-size rows."""


def _transfers(rp: RankPass) -> pa.Table:
    """Per (op, group, role) matched across ranks: bytes and transfer time for bandwidth,
    and the time waiting for peers (empty without matching)."""
    mt = rp.matched
    triples = mt.triples if mt is not None else ()
    pt = mt.per_triple if mt is not None else {}
    return pa.table(
        {
            "op": pa.array([t[0] for t in triples], pa.string()),
            "pg_name": pa.array([t[1] for t in triples], pa.string()),
            "role": pa.array([t[2] for t in triples], pa.string()),
            "bw_bytes": pa.array(pt.get("bw_bytes", []), pa.float64()),
            "bw_s": pa.array(pt.get("bw_s", []), pa.float64()),
            "peer_wait_s": pa.array(pt.get("wait_s", []), pa.float64()),
        }
    )


def op_table(run: Source) -> pa.Table:
    """One row per (op, process group, role), largest service time first."""
    rp = rank_pass(run)
    return over_aggregates(
        rp,
        f"""
        , per_op AS (
            SELECT op, pg_name, any_value(pg_ranks) AS pg_ranks,
                   any_value(group_size) AS group_size, role,
                   count(DISTINCT rank)::BIGINT AS ranks, sum(count)::BIGINT AS count,
                   sum(bytes)::BIGINT AS bytes, sum(time_s) AS time_s,
                   sum(service_s) AS service_s, sum(time_s) / sum(count) AS avg_latency_s,
                   any_value({factor_sql()}) AS factor
            FROM agg GROUP BY op, pg_name, role
        ), timed AS (
            SELECT p.*, coalesce(t.peer_wait_s, 0.0) AS peer_wait_s,
                   CASE WHEN t.bw_s > 0 THEN t.bw_bytes / t.bw_s / 1e9
                        WHEN p.service_s > 0 THEN p.bytes / p.service_s / 1e9
                        ELSE 0.0 END AS algbw_GBps
            FROM per_op p LEFT JOIN transfers t USING (op, pg_name, role)
        )
        SELECT op, pg_name, pg_ranks, group_size, role, ranks, count, bytes, time_s,
               avg_latency_s, algbw_GBps, algbw_GBps * factor AS busbw_GBps, service_s,
               greatest(time_s - service_s, 0.0) AS queue_s, peer_wait_s,
               greatest(service_s - peer_wait_s, 0.0) AS transfer_s
        FROM timed
        ORDER BY service_s DESC, time_s DESC, op, pg_name, role
        """,
        transfers=_transfers(rp),
    )


def op_size_table(run: Source) -> pa.Table:
    """One row per (op, group, role, log2 size bucket): the tidy CSV table."""
    rp = rank_pass(run, quantiles=True)
    assert rp.quantiles is not None
    return over_aggregates(
        rp,
        f"""
        , sums AS (
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
        """,
        agg_quantiles=rp.quantiles,
    )


def size_histogram(run: Source) -> pa.Table:
    """Message sizes in log2 buckets per op, by call count and by volume."""
    return over_aggregates(
        rank_pass(run),
        """
        SELECT op, size_bucket_bytes, sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes
        FROM agg GROUP BY op, size_bucket_bytes ORDER BY op, size_bucket_bytes
        """,
    )
