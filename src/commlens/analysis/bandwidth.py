"""nccl-tests bandwidth conventions (conventions §3) and wire volume (§2).

algbw = S / t; busbw = algbw × factor, where the factor depends on the op and
on ``n``, the size of the op's *own* process group (never the world size).
The factors come from the one op table, :data:`commlens.optable.OP_TRAFFIC`.
"""

from __future__ import annotations

from commlens.optable import OP_TRAFFIC, WHOLE, Traffic, bus_factor
from commlens.optable import wire_factor as wire_factor  # re-exported with bus_factor


def algbw_GBps(size_bytes: float, seconds: float) -> float:
    """S / t in GB/s (1e9 bytes)."""
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_GBps(op: str, n: int, size_bytes: float, seconds: float) -> float:
    return algbw_GBps(size_bytes, seconds) * bus_factor(op, n)


def _traffic_sql(t: Traffic, n_col: str, convention: str) -> str:
    if not t.shared:
        return f"{float(t.passes)}"
    if convention == "study_b":
        return f"(CASE WHEN {n_col} > 1 THEN {float(t.passes)} ELSE 0.0 END)"
    return (
        f"(CASE WHEN {n_col} > 1 THEN CAST({n_col} - 1 AS DOUBLE) * {t.passes} / {n_col} "
        "ELSE 0.0 END)"
    )


def _quoted(name: str) -> str:
    return "'" + name.replace("'", "''") + "'"


def factor_sql(op_col: str = "op", n_col: str = "group_size", convention: str = "bus") -> str:
    """The factors of :func:`bus_factor` (``bus`` or ``ring``) or of Study B's
    wire convention (``study_b``) as a SQL CASE expression, for DuckDB."""
    convention = "study_b" if convention == "study_b" else "ring"
    ops: dict[Traffic, list[str]] = {}
    for op, t in OP_TRAFFIC.items():
        if t != WHOLE:
            ops.setdefault(t, []).append(op)
    whens = " ".join(
        f"WHEN {op_col} IN ({', '.join(map(_quoted, names))}) "
        f"THEN {_traffic_sql(t, n_col, convention)}"
        for t, names in ops.items()
    )
    return f"(CASE {whens} ELSE {_traffic_sql(WHOLE, n_col, convention)} END)"
