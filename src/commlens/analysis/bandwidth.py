"""nccl-tests bandwidth conventions (conventions §3) and wire volume (§2).

algbw = S / t; busbw = algbw × factor, where the factor depends on the op and
on ``n``, the size of the op's *own* process group (never the world size).
"""

from __future__ import annotations

# op -> kind of bus factor; object variants move like their tensor op.
_FACTOR_KIND: dict[str, str] = {
    "all_reduce": "allreduce",
    "all_gather": "gather",
    "reduce_scatter": "gather",
    "all_to_all": "gather",
    "all_gather_object": "gather",
    # gather/scatter are not in nccl-tests; like all-gather, each rank's
    # share of S crosses the root's link once (a reconstruction).
    "gather": "gather",
    "scatter": "gather",
    "gather_object": "gather",
    "scatter_object": "gather",
    "broadcast": "one",
    "reduce": "one",
    "send": "one",
    "recv": "one",
    "broadcast_object": "one",
    "send_object": "one",
    "recv_object": "one",
    "barrier": "one",
}


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` in a group of ``n`` ranks."""
    kind = _FACTOR_KIND.get(op, "one")
    if n <= 1:
        return 1.0 if kind == "one" else 0.0
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind == "gather":
        return (n - 1) / n
    return 1.0


def wire_factor(op: str, n: int, convention: str = "ring") -> float:
    """Bytes one rank puts on the wire per byte of S (conventions §2).

    ``ring``: all-reduce 2(n−1)/n, all-gather / reduce-scatter / all-to-all
    (n−1)/n, broadcast / send / recv 1. ``study_b``: the same without the
    (n−1)/n, i.e. all-reduce 2, the gathers 1.
    """
    kind = _FACTOR_KIND.get(op, "one")
    if convention == "study_b":
        return 2.0 if kind == "allreduce" else 1.0
    if convention != "ring":
        raise ValueError(f"unknown wire convention {convention!r}")
    return bus_factor(op, n)


def algbw_GBps(size_bytes: float, seconds: float) -> float:
    """S / t in GB/s (1e9 bytes)."""
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_GBps(op: str, n: int, size_bytes: float, seconds: float) -> float:
    return algbw_GBps(size_bytes, seconds) * bus_factor(op, n)


def factor_sql(op_col: str = "op", n_col: str = "group_size", convention: str = "bus") -> str:
    """The same factors as a SQL CASE expression (for DuckDB aggregation)."""
    allreduce = [k for k, v in _FACTOR_KIND.items() if v == "allreduce"]
    gather = [k for k, v in _FACTOR_KIND.items() if v == "gather"]

    def names(ops: list[str]) -> str:
        return ", ".join(f"'{o}'" for o in ops)

    if convention == "study_b":
        return f"(CASE WHEN {op_col} IN ({names(allreduce)}) THEN 2.0 ELSE 1.0 END)"
    return (
        f"(CASE WHEN {op_col} IN ({names(allreduce)}) THEN "
        f"(CASE WHEN {n_col} > 1 THEN 2.0 * ({n_col} - 1) / {n_col} ELSE 0.0 END) "
        f"WHEN {op_col} IN ({names(gather)}) THEN "
        f"(CASE WHEN {n_col} > 1 THEN ({n_col} - 1.0) / {n_col} ELSE 0.0 END) "
        "ELSE 1.0 END)"
    )
