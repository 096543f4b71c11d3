"""Where each step goes, per rank: step time, communication, exposed time.

- ``comm_s``: time of the step's window covered by at least one communication
  op of the step (the union of ``[t_issue, t_end]`` cut to the window), so
  overlapping async ops count once and the part of an op outside its step's
  window (a pipeline stage's receive posted before its step began) counts in
  no step; ``comm_sum_s`` is the plain sum of op durations, uncut, for
  comparison. The unions are the rank pass's (:mod:`commlens.analysis.rankpass`).
- ``exposed_s``: time the training thread was blocked on communication, the
  union of ``[t_end − t_wait, t_end]`` (a blocking op blocks from issue to
  end; an async op blocks from its ``wait()`` until it completes), cut to the
  window too. The rest of ``comm_s`` ran under compute: ``overlapped_s``.
- ``step_s``: the length of the step's recorded window on rank 0's clock (the
  clock of the unions); for a step without a recorded window (e.g. ops after
  the last optimizer step) the span of its ops, flagged by ``step_source =
  'ops'``. So ``comm_s <= step_s`` and every share is at most 1 by construction.
- ``kind``: ``step`` for a recorded step (or any step of a run that recorded
  none); ``setup`` for the set-up window (step −1) and events before the
  first recorded step, ``after last
  step`` for those after the last one, ``unrecorded`` for a step number in
  between without a window. Rows other than ``step`` are their own rows,
  never summed into the per-rank figures (:func:`rank_summary`).
"""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.rankpass import Source, rank_pass
from commlens.analysis.sql import query


def step_table(run: Source) -> pa.Table:
    """One row per (rank, step)."""
    rp = rank_pass(run)
    return query(
        """
        WITH joined AS (
            SELECT coalesce(o.rank, st.rank) AS rank, coalesce(o.step, st.step) AS step,
                   CASE WHEN st.step IS NOT NULL THEN (st.t_end_ns - st.t_start_ns) / 1e9
                        ELSE (o.last_ns - o.first_ns) / 1e9 END AS step_s,
                   CASE WHEN st.step IS NOT NULL THEN 'manifest' ELSE 'ops' END AS step_source,
                   coalesce(st.t_start_ns, o.first_ns) AS t_start_ns,
                   coalesce(o.ops, 0)::BIGINT AS ops, coalesce(o.bytes, 0)::BIGINT AS bytes,
                   coalesce(o.comm_s, 0.0) AS comm_s,
                   coalesce(o.comm_sum_s, 0.0) AS comm_sum_s,
                   coalesce(o.exposed_s, 0.0) AS exposed_s
            FROM step_ops o
            FULL OUTER JOIN steps st ON o.rank = st.rank AND o.step = st.step
        )
        SELECT rank, step, step_source, t_start_ns, step_s, ops, bytes, comm_s, comm_sum_s,
               CASE WHEN step_s > 0 THEN comm_s / step_s ELSE 0.0 END AS comm_share,
               exposed_s,
               CASE WHEN step_s > 0 THEN exposed_s / step_s ELSE 0.0 END AS exposed_share,
               comm_s - exposed_s AS overlapped_s,
               greatest(step_s - exposed_s, 0.0) AS compute_s,
               CASE WHEN step < 0 THEN 'setup'
                    WHEN step_source = 'manifest' OR NOT EXISTS (SELECT 1 FROM steps) THEN 'step'
                    WHEN step < (SELECT min(step) FROM steps WHERE step >= 0) THEN 'setup'
                    WHEN step > (SELECT max(step) FROM steps) THEN 'after last step'
                    ELSE 'unrecorded' END AS kind
        FROM joined
        ORDER BY step, rank
        """,
        step_ops=rp.steps,
        steps=rp.windows,
    )


def step_summary(per_rank: pa.Table) -> pa.Table:
    """One row per step over its ranks: the slowest rank's step time, mean shares."""
    return query(
        """
        SELECT step, count(*)::BIGINT AS ranks, max(step_s) AS step_s,
               avg(comm_s) AS comm_s, avg(comm_share) AS comm_share,
               avg(exposed_s) AS exposed_s, avg(exposed_share) AS exposed_share,
               avg(overlapped_s) AS overlapped_s, avg(compute_s) AS compute_s,
               sum(ops)::BIGINT AS ops, sum(bytes)::BIGINT AS bytes,
               bool_and(step_source = 'manifest') AS timed,
               CASE WHEN bool_or(kind = 'step') THEN 'step' ELSE any_value(kind) END AS kind
        FROM per_rank GROUP BY step ORDER BY step
        """,
        per_rank=per_rank,
    )


def rank_summary(per_rank: pa.Table) -> pa.Table:
    """One row per rank over its steps with a recorded window (every step of a rank
    that recorded none): set-up and the tail after the last step are never summed in."""
    return query(
        """
        WITH kept AS (
            SELECT * FROM per_rank
            WHERE (step_source = 'manifest' AND kind = 'step')
               OR (kind IN ('step', 'unrecorded') AND rank NOT IN (
                   SELECT rank FROM per_rank WHERE step_source = 'manifest' AND kind = 'step'))
        )
        SELECT rank, count(*)::BIGINT AS steps, sum(step_s) AS step_s,
               sum(comm_s) AS comm_s,
               CASE WHEN sum(step_s) > 0 THEN sum(comm_s) / sum(step_s) ELSE 0.0 END
                   AS comm_share,
               sum(exposed_s) AS exposed_s,
               CASE WHEN sum(step_s) > 0 THEN sum(exposed_s) / sum(step_s) ELSE 0.0 END
                   AS exposed_share,
               sum(ops)::BIGINT AS ops, sum(bytes)::BIGINT AS bytes
        FROM kept GROUP BY rank ORDER BY rank
        """,
        per_rank=per_rank,
    )
