"""Rank clocks onto rank 0's clock: the one formula, in its SQL and numpy forms.

Each rank's manifest entry may carry a measured clock (``offset_ns``,
``drift``, ``t_ref_ns``; see ``commlens.capture.clock``). A time ``t`` written
by that rank is moved onto rank 0's clock as

    t + offset_ns + round_half_even(drift · (t − t_ref_ns))

in int64 nanoseconds (the manifest's bounds keep it from overflowing). A rank
without a measured clock keeps its times. The lazy DuckDB views use
:func:`align_sql`; everything that holds times in numpy (the per-rank pass,
a loaded run, step windows, Parquet statistics) uses :func:`align_numpy`.
Both compute ``drift · (t − t_ref)`` in float64 and round half to even, so
they agree to the nanosecond.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from commlens.trace.manifest import Clock, Manifest

NO_CLOCK = Clock(0, 0.0, 0)
"""The clock of a rank without a measured one: its times are kept."""


def clocks(manifest: Manifest) -> dict[int, Clock]:
    """rank -> its measured clock, for every rank that has one."""
    return {r: info.clock for r, info in manifest.ranks.items() if info.clock is not None}


def clock_table(manifest: Manifest | dict[int, Clock]) -> pa.Table:
    """``rank, offset_ns, drift, t_ref_ns``: the table :func:`align_sql` joins on (of the
    manifest's clocks, or of the clocks given)."""
    found = clocks(manifest) if isinstance(manifest, Manifest) else manifest
    return pa.table(
        {
            "rank": pa.array(list(found), pa.int32()),
            "offset_ns": pa.array([c.offset_ns for c in found.values()], pa.int64()),
            "drift": pa.array([c.drift for c in found.values()], pa.float64()),
            "t_ref_ns": pa.array([c.t_ref_ns for c in found.values()], pa.int64()),
        }
    )


def align_sql(col: str, clock: str = "c") -> str:
    """The formula in SQL, for ``col`` of a row joined (LEFT JOIN) with the clock
    table as ``clock`` (no row: the times are kept)."""
    return (
        f"({col} + coalesce({clock}.offset_ns, 0) + CAST(round_even(coalesce({clock}.drift, 0.0)"
        f" * ({col} - coalesce({clock}.t_ref_ns, 0)), 0) AS BIGINT))"
    )


def moved(clock: Clock, ns: int) -> Clock:
    """``clock`` moving times ``ns`` nanoseconds further."""
    return Clock(clock.offset_ns + ns, clock.drift, clock.t_ref_ns)


def moves(clock: Clock) -> bool:
    """Whether the formula changes any time (a zero offset and drift change none)."""
    return clock.offset_ns != 0 or clock.drift != 0.0


def align_numpy(t: np.ndarray, clock: Clock) -> np.ndarray:
    """The formula in numpy, for int64 times ``t`` of one rank."""
    if not moves(clock):
        return t
    return t + clock.offset_ns + np.rint(clock.drift * (t - clock.t_ref_ns)).astype(np.int64)
