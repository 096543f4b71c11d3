"""Per-rank group aggregates, the small table behind the op, size and phase tables.

For one rank's events, one row per (op, group, role, log2 size bucket,
phase, module) with calls, bytes, time inside calls and blocked time.
Summing these rows over ranks gives every per-op, per-size, per-phase and
per-module figure without another pass over the events. ``service_s`` is the
time each op held its group's queue (from ``max(issue, end of the group's
previous op)`` to its end): unlike ``time_s`` it adds up across ops queued
on one group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.analysis.codes import Codes, dense_codes, first_index

MIXED_RADIX_LIMIT = 2.0**62  # above it, the key is built (and kept dense) step by step

BUCKET_SQL = (
    "CASE WHEN size_bytes <= 0 THEN 0::BIGINT "
    "ELSE (1::BIGINT << CAST(floor(log2(size_bytes)) AS INTEGER)) END"
)
""":func:`size_bucket` in SQL, over a ``size_bytes`` column."""


def size_bucket(size: np.ndarray) -> np.ndarray:
    """Lower bound of the log2 bucket of each size (0 for empty messages)."""
    out = np.zeros(size.size, np.int64)
    pos = size > 0
    exp = np.floor(np.log2(size[pos].astype(np.float64))).astype(np.int64)
    # guard float rounding at the edges of a bucket
    exp -= (np.int64(1) << exp) > size[pos]
    exp += (np.int64(1) << (exp + 1)) <= size[pos]
    out[pos] = np.int64(1) << exp
    return out


@dataclass
class RunGroups:
    """What each process group looks like (first seen in any rank)."""

    size: dict[str, int] = field(default_factory=dict)
    ranks: dict[str, list[int]] = field(default_factory=dict)

    def table(self) -> pa.Table:
        names = sorted(self.size)
        return pa.table(
            {
                "pg_name": pa.array(names, pa.string()),
                "group_size": pa.array([self.size[n] for n in names], pa.int32()),
                "pg_ranks": pa.array([self.ranks[n] for n in names], pa.list_(pa.int32())),
            }
        )


def learn_groups(
    info: RunGroups,
    groups: Codes,
    pg: np.ndarray,
    gsize: np.ndarray,
    read_ranks: Callable[[list[int]], list[Any]],
) -> None:
    """Record size and ranks of the groups first seen here; ``read_ranks(rows)`` gives
    ``pg_ranks`` at those rows (read only for new groups: lists are slow to read)."""
    uniq, inverse = dense_codes(pg)
    first = first_index(inverse, uniq.size)
    new = [
        (groups.values[c], r)
        for c, r in zip(uniq.tolist(), first.tolist(), strict=True)
        if groups.values[c] not in info.size
    ]
    if not new:
        return
    values = read_ranks([row for _, row in new])
    for (name, row), value in zip(new, values, strict=True):
        info.size[name] = int(gsize[row])
        info.ranks[name] = [int(r) for r in value] if value is not None else []


def rank_aggregate(
    rank: int,
    names: dict[str, Codes],
    codes: dict[str, np.ndarray],
    size: np.ndarray,
    duration: np.ndarray,
    wait_ns: np.ndarray,
    service_ns: np.ndarray,
    inside: np.ndarray | None = None,
) -> pa.Table:
    """Group one rank's events by (op, pg_name, role, size bucket, phase, module);
    ``service_ns``: each op's time at the head of its group's queue. With ``inside``
    (a mask of the events), rows are also split by it, in an ``inside`` column."""
    bucket = size_bucket(size)
    _, bucket_code = dense_codes(
        np.where(bucket > 0, np.log2(np.maximum(bucket, 1)) + 1, 0).astype(np.int64)
    )
    key = np.zeros(size.size, np.int64)
    parts: list[tuple[str, np.ndarray, int]] = []
    for name in ("op", "pg_name", "role", "phase", "module"):
        parts.append((name, codes[name], len(names[name].values)))
    parts.append(("bucket", bucket_code, int(bucket_code.max()) + 1 if bucket_code.size else 1))
    if inside is not None:
        parts.append(("inside", inside.astype(np.int64), 2))
    if np.prod([float(w) for _, _, w in parts]) < MIXED_RADIX_LIMIT:  # one mixed-radix key
        for _, col, width in parts:
            key = key * width + col
        uniq, key = dense_codes(key)
        stack = [uniq]
        layers = [parts]
    else:  # compose step by step, keeping the key dense (and small) after each step
        stack, layers = [], []
        for part in parts:
            uniq, key = dense_codes(key * part[2] + part[1])
            stack.append(uniq)
            layers.append([part])
    n = stack[-1].size
    # decode each distinct key back into its components
    comp: dict[str, np.ndarray] = {}
    idx = np.arange(n)
    for layer, uniq in zip(reversed(layers), reversed(stack), strict=True):
        value = uniq[idx]
        for name, _, width in reversed(layer):
            comp[name] = value % width
            value = value // width
        idx = value
    bucket_of = np.zeros(n, np.int64)
    rows = first_index(key, n)
    bucket_of[:] = bucket[rows]
    table = pa.table(
        {
            "rank": pa.array(np.full(n, rank, np.int32)),
            "op": pa.array([names["op"].values[i] for i in comp["op"].tolist()], pa.string()),
            "pg_name": pa.array(
                [names["pg_name"].values[i] for i in comp["pg_name"].tolist()], pa.string()
            ),
            "role": pa.array([names["role"].values[i] for i in comp["role"].tolist()], pa.string()),
            "size_bucket_bytes": pa.array(bucket_of, pa.int64()),
            "phase": pa.array(
                [names["phase"].values[i] for i in comp["phase"].tolist()], pa.string()
            ),
            "module": pa.array(
                [names["module"].values[i] for i in comp["module"].tolist()], pa.string()
            ),
            "count": pa.array(np.bincount(key, minlength=n), pa.int64()),
            "bytes": pa.array(_int_sum(key, size, n)),
            "time_s": pa.array(np.bincount(key, duration, n)),
            "wait_s": pa.array(np.bincount(key, wait_ns / 1e9, n)),
            "service_s": pa.array(np.bincount(key, service_ns / 1e9, n)),
        }
    )
    if inside is not None:
        table = table.append_column("inside", pa.array(comp["inside"].astype(bool)))
    return table


AGG_KEYS = ("rank", "op", "pg_name", "role", "size_bucket_bytes", "phase", "module")
AGG_SUMS = ("count", "bytes", "time_s", "wait_s", "service_s")


def split_aggregate(agg: pa.Table) -> tuple[pa.Table, pa.Table]:
    """An aggregate made with ``inside`` as (all events, the events inside)."""
    whole = agg.group_by(list(AGG_KEYS), use_threads=False).aggregate(
        [(name, "sum") for name in AGG_SUMS]
    )
    whole = whole.rename_columns([c.removesuffix("_sum") for c in whole.column_names])
    inner = agg.filter(agg.column("inside")).drop_columns(["inside"])
    return whole.select([*AGG_KEYS, *AGG_SUMS]), inner


def _int_sum(key: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.add.at(out, key, values.astype(np.int64))
    return out
