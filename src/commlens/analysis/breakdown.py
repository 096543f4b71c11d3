"""Communication by phase (forward/backward/optimizer/other) and by module."""

from __future__ import annotations

import pyarrow as pa

from commlens.analysis.source import RunView


def _by(run: RunView, key: str, extra: str = "") -> pa.Table:
    return run.sql(
        f"""
        SELECT {key}, {extra}
               count(*)::BIGINT AS count, coalesce(sum(size_bytes), 0)::BIGINT AS bytes,
               coalesce(sum(duration_s), 0.0) AS time_s,
               coalesce(sum(t_wait_ns), 0) / 1e9 AS wait_s,
               coalesce(sum(duration_s) / nullif(sum(sum(duration_s)) OVER (), 0), 0.0)
                   AS time_share
        FROM events GROUP BY {key} ORDER BY time_s DESC, {key}
        """
    )


def phase_table(run: RunView) -> pa.Table:
    """Per phase: calls, bytes, time inside calls, blocked time, share of comm time."""
    return _by(run, "phase")


def module_table(run: RunView) -> pa.Table:
    """Per issuing module (empty: outside any module) and phase."""
    return _by(run, "module", "string_agg(DISTINCT phase, ',' ORDER BY phase) AS phases,")


def op_phase_table(run: RunView) -> pa.Table:
    """Per (phase, op): the cross tabulation behind the per-phase shares."""
    return _by(run, "phase, op")
