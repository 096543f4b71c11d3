"""Cross-rank view of collectives: arrival skew, waiting vs transfer, stragglers.

A collective instance is matched across the ranks of its group by
(``pg_name``, ``op``, k): the k-th call of that op on that group in each
rank, in sequence order. For each instance, with arrivals ``t_issue`` on
rank 0's clock:

- skew = last arrival − first arrival;
- a rank's wait for the last peer = last arrival − own arrival;
- its transfer = own ``t_end`` − last arrival;

so wait + transfer = the rank's measured latency, exactly. Point-to-point
ops, single-rank groups, groups touching a missing rank and instances that
not every member of the group recorded are left out.
"""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.source import RunView

P2P_OPS = ("send", "recv", "send_object", "recv_object")


def ensure_matched(run: RunView) -> str:
    """Build the temporary table ``matched`` (one row per matched event) once."""
    if "matched" in run.materialized:
        return "matched"
    p2p = ", ".join(f"'{op}'" for op in P2P_OPS)
    excluded = ""
    if run.missing_ranks:
        missing = ", ".join(str(r) for r in run.missing_ranks)
        excluded = f"AND NOT list_has_any(pg_ranks, [{missing}]::INTEGER[])"
    run.con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE matched AS
        WITH ev AS (
            SELECT rank, seq, op, pg_name, role, group_size, step, t_issue_ns, t_end_ns,
                   duration_s,
                   row_number() OVER (PARTITION BY rank, pg_name, op ORDER BY seq) AS k
            FROM events
            WHERE op NOT IN ({p2p}) AND group_size > 1 {excluded}
        ), inst AS (
            SELECT pg_name, op, k, min(t_issue_ns) AS first_ns, max(t_issue_ns) AS last_ns,
                   arg_max(rank, t_issue_ns) AS last_rank
            FROM ev GROUP BY pg_name, op, k
            HAVING count(DISTINCT rank) = max(group_size)
        )
        SELECT ev.rank, ev.seq, ev.op, ev.pg_name, ev.role, ev.group_size, ev.step, ev.k,
               ev.t_issue_ns, ev.t_end_ns, ev.duration_s, inst.first_ns, inst.last_ns,
               inst.last_rank,
               (inst.last_ns - inst.first_ns) / 1e9 AS skew_s,
               (inst.last_ns - ev.t_issue_ns) / 1e9 AS wait_last_s,
               (ev.t_end_ns - inst.last_ns) / 1e9 AS transfer_s,
               (ev.t_issue_ns - inst.first_ns) / 1e9 AS lateness_s
        FROM ev JOIN inst USING (pg_name, op, k)
        """
    )
    run.materialized.add("matched")
    return "matched"


def matched_events(run: RunView) -> pa.Table:
    """Every matched event with its instance's first/last arrival, wait and transfer."""
    ensure_matched(run)
    return run.sql("SELECT * FROM matched ORDER BY pg_name, op, k, rank")


def skew_table(run: RunView) -> pa.Table:
    """Per (op, group, role): instances, skew statistics, wait vs transfer time."""
    ensure_matched(run)
    return run.sql(
        """
        WITH inst AS (
            SELECT op, pg_name, role, k, any_value(skew_s) AS skew_s
            FROM matched GROUP BY op, pg_name, role, k
        ), skews AS (
            SELECT op, pg_name, role, count(*)::BIGINT AS instances,
                   avg(skew_s) AS mean_skew_s, quantile_cont(skew_s, 0.5) AS p50_skew_s,
                   quantile_cont(skew_s, 0.99) AS p99_skew_s, max(skew_s) AS max_skew_s
            FROM inst GROUP BY op, pg_name, role
        ), times AS (
            SELECT op, pg_name, role, sum(duration_s) AS time_s,
                   sum(wait_last_s) AS wait_s, sum(transfer_s) AS transfer_s
            FROM matched GROUP BY op, pg_name, role
        )
        SELECT s.op, s.pg_name, s.role, s.instances, s.mean_skew_s, s.p50_skew_s,
               s.p99_skew_s, s.max_skew_s, t.time_s, t.wait_s, t.transfer_s,
               CASE WHEN t.time_s > 0 THEN t.wait_s / t.time_s ELSE 0.0 END AS wait_share
        FROM skews s JOIN times t USING (op, pg_name, role)
        ORDER BY t.wait_s DESC, s.op, s.pg_name
        """
    )


def straggler_table(run: RunView) -> pa.Table:
    """Ranks ranked as stragglers: who arrives last, and how long others wait for it.

    ``last_count``: instances where the rank arrived last, strictly after the
    first (ties with everyone do not count); ``blame_s``: the skew of those
    instances (how long the first arriver waited for it);
    ``mean_lateness_s``: mean of own arrival − first arrival.
    """
    ensure_matched(run)
    return run.sql(
        """
        WITH per_rank AS (
            SELECT rank, count(*)::BIGINT AS instances,
                   sum(CASE WHEN t_issue_ns = last_ns AND last_ns > first_ns THEN 1 ELSE 0 END)
                       ::BIGINT AS last_count,
                   sum(CASE WHEN t_issue_ns = last_ns THEN skew_s ELSE 0.0 END) AS blame_s,
                   avg(lateness_s) AS mean_lateness_s, sum(wait_last_s) AS wait_s,
                   sum(transfer_s) AS transfer_s
            FROM matched GROUP BY rank
        )
        SELECT row_number() OVER (ORDER BY blame_s DESC, mean_lateness_s DESC, rank)::BIGINT
                   AS straggler_rank, *
        FROM per_rank ORDER BY straggler_rank
        """
    )


def skew_by_step(run: RunView) -> pa.Table:
    """Per step, summed over ranks: time waiting for the last peer vs transferring."""
    ensure_matched(run)
    return run.sql(
        """
        SELECT step, sum(wait_last_s) AS wait_s, sum(transfer_s) AS transfer_s,
               max(skew_s) AS max_skew_s
        FROM matched GROUP BY step ORDER BY step
        """
    )
