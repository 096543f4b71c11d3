"""Exact latency percentiles per (op, group, role, size bucket), gathered rank by rank.

Each rank's ``duration_s`` values are filed under their key as the rank pass
reads them (8 bytes an event: the values themselves, nothing of the rest of
the run), and each key's percentiles are taken at the end by selection
(``np.partition``), with DuckDB's ``quantile_cont`` rule, to the last bit:
the value at position ``(n − 1)·q`` of the sorted values, interpolated
between its two neighbours as ``lo·(1 − d) + hi·d`` (``d`` the fraction),
``hi·d`` rounded and the sum then rounded once (a fused multiply-add, as
DuckDB's build computes it). Null latencies are left out, as SQL leaves them
out.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.analysis.codes import Codes, dense_codes, first_index
from commlens.analysis.spill import Index, Spill, read_chunk

QUANTILES = (0.5, 0.99)
"""The percentiles of the report's size table: p50 and p99."""

VALUE = np.dtype(np.float64)
"""A spilled latency."""
Key = tuple[str, str, str, int]
"""(op, group, role, size bucket in bytes)."""


class LatencyQuantiles:
    """The latencies of every rank added so far, filed by key (:meth:`add`): in memory,
    or with ``spill`` written to disk (one chunk a key, :mod:`commlens.analysis.spill`)
    and read back a key at a time when the percentiles are taken."""

    def __init__(self, spill: Spill | None = None) -> None:
        self.values: dict[Key, list[np.ndarray]] = {}
        self.spill = spill
        self.codes: dict[Key, int] = {}
        """Each key's chunk in ``spill``."""
        self.spilled: dict[Key, list[tuple[Index, int]]] = {}
        """Where each key's latencies are on disk: (the spill's index, its chunk there)."""

    def add(
        self,
        names: dict[str, Codes],
        op: np.ndarray,
        pg: np.ndarray,
        role: np.ndarray,
        bucket: np.ndarray,
        duration: pa.ChunkedArray | pa.Array,
        rank: int = 0,
    ) -> None:
        """One rank's events: codes of op, group and role (into ``names``), size bucket
        (bytes) and the raw ``duration_s`` column (nulls left out)."""
        valid = pc.is_valid(duration).to_numpy(zero_copy_only=False)
        values = pc.fill_null(duration, 0.0).to_numpy()
        if not valid.all():
            op, pg, role, bucket, values = (a[valid] for a in (op, pg, role, bucket, values))
        if not values.size:
            return
        key = np.zeros(values.size, np.int64)
        for col in (op, pg, role, bucket):
            _, code = dense_codes(col.astype(np.int64))
            key = dense_codes(key * (int(code.max()) + 1) + code)[1]
        n = int(key.max()) + 1
        first = first_index(key, n)
        order = np.argsort(key, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(key, minlength=n))]
        ordered = values[order]
        words = [names[k].values for k in ("op", "pg_name", "role")]
        keys = [
            (words[0][op[row]], words[1][pg[row]], words[2][role[row]], int(bucket[row]))
            for row in first.tolist()
        ]
        if self.spill is not None:
            chunk = np.array([self.codes.setdefault(k, len(self.codes)) for k in keys])
            self.spill.add(rank, np.repeat(chunk, np.diff(bounds)), ordered)
            return
        for i, k in enumerate(keys):
            self.values.setdefault(k, []).append(ordered[bounds[i] : bounds[i + 1]].copy())

    def merge(self, other: LatencyQuantiles) -> None:
        """Add the latencies filed in ``other``."""
        for k, parts in other.values.items():
            self.values.setdefault(k, []).extend(parts)
        for k, where in other.spilled.items():
            self.spilled.setdefault(k, []).extend(where)
        if other.spill is not None:
            for k, code in other.codes.items():
                self.spilled.setdefault(k, []).append((other.spill.index, code))

    def table(self) -> pa.Table:
        """``op, pg_name, role, size_bucket_bytes, q`` (p50 and p99), one row per key."""
        keys = sorted(set(self.values) | set(self.spilled))
        q: list[list[float]] = []
        for k in keys:
            read = [read_chunk(index, code, VALUE) for index, code in self.spilled.get(k, [])]
            values = np.concatenate([*self.values.get(k, []), *read])
            q.append(quantile_cont(values, QUANTILES))
        return pa.table(
            {
                "op": pa.array([k[0] for k in keys], pa.string()),
                "pg_name": pa.array([k[1] for k in keys], pa.string()),
                "role": pa.array([k[2] for k in keys], pa.string()),
                "size_bucket_bytes": pa.array([k[3] for k in keys], pa.int64()),
                "q": pa.array(q, pa.list_(pa.float64())),
            }
        )


def quantile_cont(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """The ``qs`` percentiles of ``values`` (not empty; reordered in place) by DuckDB's
    ``quantile_cont`` rule (see the module docstring)."""
    n = values.size
    spots = [(n - 1) * q for q in qs]
    picks = sorted({math.floor(s) for s in spots} | {math.ceil(s) for s in spots})
    values.partition(picks)
    out = []
    for s in spots:
        lo, hi = math.floor(s), math.ceil(s)
        a, d = float(values[lo]), s - lo
        out.append(a if lo == hi else _fma(a, 1.0 - d, float(values[hi]) * d))
    return out


def _fma(x: float, y: float, z: float) -> float:
    """``x·y + z`` rounded once."""
    return float(Fraction(x) * Fraction(y) + Fraction(z))
