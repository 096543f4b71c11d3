"""Communication by phase (forward/backward/optimizer/other) and by module.

``time_s`` is the time inside calls (issue → end); ``service_s`` the time at
the head of the group's queue (it adds up across queued async ops, see
:mod:`commlens.analysis.rankagg`); ``time_share`` is the share of service time.
"""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.ops import over_aggregates
from commlens.analysis.rankpass import Source, rank_pass


def _by(run: Source, key: str, extra: str = "") -> pa.Table:
    return over_aggregates(
        rank_pass(run),
        f"""
        SELECT {key}, {extra}
               sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes,
               sum(time_s) AS time_s, sum(service_s) AS service_s, sum(wait_s) AS wait_s,
               coalesce(sum(service_s) / nullif(sum(sum(service_s)) OVER (), 0), 0.0)
                   AS time_share
        FROM agg GROUP BY {key} ORDER BY service_s DESC, time_s DESC, {key}
        """,
    )


def phase_table(run: Source) -> pa.Table:
    """Per phase: calls, bytes, time inside calls, service time, blocked time, share of
    service time."""
    return _by(run, "phase")


def module_table(run: Source) -> pa.Table:
    """Per issuing module (empty: outside any module), with the phases it issued in."""
    return _by(run, "module", "string_agg(DISTINCT phase, ',' ORDER BY phase) AS phases,")


def op_phase_table(run: Source) -> pa.Table:
    """Per (phase, op): the cross tabulation behind the per-phase shares."""
    return _by(run, "phase, op")
