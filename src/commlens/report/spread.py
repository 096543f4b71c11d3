"""Tables of many ranks and groups made readable: per-rank columns as a distribution
with the worst ranks by name; per-group rows summed per role ("dp × 32 groups of 32")
with the spread over the groups and the worst group by name."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.trace.files import format_ranks

MANY_RANKS = 32
"""Above this many ranks a per-rank table is summarised, not only cut short."""
WORST = 5


def rank_spread_note(ranks: pa.Table, columns: list[tuple[str, str]]) -> str:
    """'comm (%) over 1024 ranks: min .. q1 .. median .. q3 .. max; highest: rank 7 (..)'
    per column ``(key, title)`` of share values, when ``ranks`` has more than
    :data:`MANY_RANKS` rows; else ''."""
    if ranks.num_rows <= MANY_RANKS:
        return ""
    rank = np.asarray(ranks.column("rank").to_numpy(zero_copy_only=False))
    lines = []
    for key, title in columns:
        values = np.asarray(ranks.column(key).to_numpy(zero_copy_only=False), dtype=float)
        keep = ~np.isnan(values)
        if not keep.any():
            continue
        v, r = values[keep], rank[keep]
        q = np.quantile(v, [0, 0.25, 0.5, 0.75, 1.0]) * 100
        worst = np.argsort(-v, kind="stable")[:WORST]
        named = ", ".join(f"rank {int(r[i])} ({100 * v[i]:.1f})" for i in worst)
        lines.append(
            f"{title} over {v.size} ranks: min {q[0]:.1f}, quartiles {q[1]:.1f} / {q[2]:.1f} / "
            f"{q[3]:.1f}, max {q[4]:.1f}; highest: {named}"
        )
    return "\n".join(lines)


def top_rows(table: pa.Table, key: str, n: int) -> pa.Table:
    """The ``n`` rows of ``table`` with the largest ``key`` (NaN last), largest first."""
    values = np.asarray(table.column(key).to_numpy(zero_copy_only=False), dtype=float)
    order = np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable")[:n]
    return table.take(pa.array(order))


MANY_GROUPS = 16
"""Above this many process groups the per-group tables are summarised by role."""


def stride_ranks(ranks: list[int]) -> str:
    """Ranks as a reader takes them in: '0-7', '0,8', '33-63 by 2' (an evenly spaced
    run of more than three), else the runs of :func:`format_ranks`."""
    r = sorted({int(x) for x in ranks})
    if len(r) > 3:
        steps = {b - a for a, b in pairwise(r)}
        if len(steps) == 1 and (step := steps.pop()) > 1:
            return f"{r[0]}-{r[-1]} by {step}"
    return format_ranks(r)


def group_count_label(n_groups: int, size: int, role: str) -> str:
    """'dp × 32 groups of 32' (role left out when unknown)."""
    groups = f"{n_groups} group{'s' if n_groups != 1 else ''} of {size}"
    return f"{role} × {groups}" if role else groups


def many_groups(table: pa.Table) -> bool:
    """Whether ``table`` (with a ``pg_name`` column) spans more than :data:`MANY_GROUPS`."""
    return len(set(table.column("pg_name").to_pylist())) > MANY_GROUPS


def by_role(
    table: pa.Table,
    keys: list[str],
    sums: list[str],
    worst: str,
    ratios: dict[str, tuple[str, str]] | None = None,
    maxima: list[str] | None = None,
) -> pa.Table:
    """Rows of ``table`` (one per op and process group) summed per ``keys`` + role and
    group size: ``groups`` ('dp × 32 groups of 32'), the ``sums`` added up, ``maxima``
    their largest, ``ratios`` (name: (numerator, denominator)) of the sums, the
    ``worst`` column's min, median and max over the groups (``<worst>_min`` ...) and
    the group with the largest, by name and ranks (``worst_group``). Sorted by the sum
    of ``worst``, largest first."""
    names = table.column_names
    rows = table.to_pylist()
    sizes = (
        [len(r["pg_ranks"] or ()) for r in rows]
        if "pg_ranks" in names
        else [int(r.get("group_size") or 0) for r in rows]
    )
    buckets: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(rows):
        buckets.setdefault((*(r[k] for k in keys), r["role"], sizes[i]), []).append(i)
    out: list[dict[str, Any]] = []
    for (*key, role, size), members in buckets.items():
        values = np.array([rows[i][worst] or 0.0 for i in members], dtype=float)
        top = members[int(np.argmax(values))]
        label = str(rows[top]["pg_name"])
        if "pg_ranks" in names and rows[top]["pg_ranks"]:
            label += f" (ranks {stride_ranks(rows[top]['pg_ranks'])})"
        groups = len({rows[i]["pg_name"] for i in members})
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row |= {"role": role, "groups": group_count_label(groups, size, role)}
        for name in sums:
            row[name] = sum(rows[i][name] or 0 for i in members)
        for name in maxima or []:
            row[name] = max(rows[i][name] or 0 for i in members)
        for name, (num, den) in (ratios or {}).items():
            row[name] = row[num] / row[den] if row[den] else 0.0
        q = np.quantile(values, [0, 0.5, 1.0])
        row |= {f"{worst}_min": q[0], f"{worst}_median": q[1], f"{worst}_max": q[2]}
        row["worst_group"] = label
        out.append(row)
    out.sort(key=lambda r: -r[worst])
    return pa.Table.from_pylist(out)


def busiest_per_source(util: pa.Table) -> tuple[pa.Table, str]:
    """The utilization summary (``source``, ``unit``, ``mean_gbit_s``, ...) with, for a
    source of more than :data:`MANY_RANKS` rows (ranks or nodes), only its ``2 x WORST``
    busiest by mean, and a line per such source with the means' distribution."""
    if not util.num_rows:
        return util, ""
    source = util.column("source").to_pylist()
    unit = util.column("unit").to_pylist()
    mean = np.asarray(util.column("mean_gbit_s").to_numpy(zero_copy_only=False), dtype=float)
    keep: list[int] = []
    lines: list[str] = []
    for name in dict.fromkeys(source):
        rows = [i for i, s in enumerate(source) if s == name]
        if len(rows) <= MANY_RANKS:
            keep += rows
            continue
        v = mean[rows]
        order = [rows[i] for i in np.argsort(-v, kind="stable")[: 2 * WORST]]
        keep += sorted(order)
        q = np.quantile(v, [0, 0.25, 0.5, 0.75, 1.0])
        named = ", ".join(f"{unit[i]} ({mean[i]:.1f})" for i in order[:WORST])
        lines.append(
            f"{name}: mean Gbit/s over {len(rows):,} {str(unit[rows[0]]).split()[0]}s: "
            f"min {q[0]:.1f}, quartiles {q[1]:.1f} / {q[2]:.1f} / {q[3]:.1f}, max {q[4]:.1f}; "
            f"highest: {named}"
        )
    if len(keep) == util.num_rows:
        return util, ""
    return util.take(pa.array(keep)), "\n".join(lines)
