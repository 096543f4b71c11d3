"""Communication by phase (forward/backward/optimizer/other) and by module."""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.ops import register_aggregates
from commlens.analysis.source import RunView, accepts_run


def _by(run: RunView, key: str, extra: str = "") -> pa.Table:
    register_aggregates(run)
    return run.sql(
        f"""
        SELECT {key}, {extra}
               sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes,
               sum(time_s) AS time_s, sum(wait_s) AS wait_s,
               coalesce(sum(time_s) / nullif(sum(sum(time_s)) OVER (), 0), 0.0) AS time_share
        FROM agg GROUP BY {key} ORDER BY time_s DESC, {key}
        """
    )


@accepts_run
def phase_table(run: RunView) -> pa.Table:
    """Per phase: calls, bytes, time inside calls, blocked time, share of comm time."""
    return _by(run, "phase")


@accepts_run
def module_table(run: RunView) -> pa.Table:
    """Per issuing module (empty: outside any module), with the phases it issued in."""
    return _by(run, "module", "string_agg(DISTINCT phase, ',' ORDER BY phase) AS phases,")


@accepts_run
def op_phase_table(run: RunView) -> pa.Table:
    """Per (phase, op): the cross tabulation behind the per-phase shares."""
    return _by(run, "phase, op")
