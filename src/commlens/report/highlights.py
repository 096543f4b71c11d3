"""The few sentences a report opens with: where the step goes, and who waits."""

from __future__ import annotations

import pyarrow as pa

from commlens.report.document import check_share, fixed
from commlens.units import plural


def _pct(x: float) -> str:
    return f"{100 * check_share(x, 'a share in the headline'):.1f}%"


def highlights(
    ops: pa.Table,
    ranks: pa.Table,
    phases: pa.Table,
    skew: pa.Table,
    stragglers: pa.Table,
    exposed: str = "the caller blocked",
) -> list[str]:
    """Plain-language answers from the analysis tables (empty parts are skipped);
    ``exposed`` says what exposed time is in this run."""
    lines: list[str] = []
    step_s = sum(ranks.column("step_s").to_pylist()) if ranks.num_rows else 0.0
    if step_s > 0:
        comm = sum(ranks.column("comm_s").to_pylist())
        exposed_s = sum(ranks.column("exposed_s").to_pylist())
        lines.append(
            f"communication covers {_pct(comm / step_s)} of step time over all "
            f"ranks; {_pct(exposed_s / step_s)} is exposed ({exposed})"
        )
    total = sum(ops.column("service_s").to_pylist()) if ops.num_rows else 0.0
    if total > 0:  # service time: ops queued on one group count once, like the union
        top = ops.slice(0, 1).to_pylist()[0]
        role = f", {top['role']}" if top["role"] else ""
        lines.append(
            f"top op: {top['op']} on group {top['pg_name']} ({plural(top['group_size'], 'rank')}"
            f"{role}), {_pct(top['service_s'] / total)} of the service time of comm calls"
        )
    if phases.num_rows and total > 0:
        top_phase = phases.slice(0, 1).to_pylist()[0]
        lines.append(
            f"top phase: {top_phase['phase']}, {_pct(top_phase['time_share'])} of the "
            "service time of comm calls"
        )
    coll = sum(skew.column("time_s").to_pylist()) if skew.num_rows else 0.0
    if coll > 0:
        wait = sum(skew.column("wait_s").to_pylist())
        line = (
            f"collectives spend {_pct(wait / coll)} of their time waiting for the "
            "last rank to arrive"
        )
        if stragglers.num_rows:
            first = stragglers.slice(0, 1).to_pylist()[0]
            if first["last_count"] > 0:
                line += (
                    f"; the costliest straggler is rank {first['rank']} (last to arrive "
                    f"{plural(first['last_count'], 'time')}; others waited "
                    f"{fixed(first['blame_s'], 6)} s for it)"
                )
        lines.append(line)
        clamped = sum(skew.column("clamped").to_pylist()) if "clamped" in skew.schema.names else 0
        if clamped:
            lines.append(
                f"cross-rank clock skew exceeded the measurement on {plural(clamped, 'call')}: "
                "their wait for peers is cut to their own time and their transfer is 0"
            )
    return lines
