"""algbw / busbw against hand-computed nccl-tests values, for every op and sub-groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.analysis import algbw_GBps, bus_factor, busbw_GBps, op_table, open_run, wire_factor
from commlens.trace.synthetic import ev, write_run

# (op, group size n, S bytes, t seconds, algbw GB/s, busbw GB/s), by hand:
# algbw = S / t / 1e9; busbw = algbw x {all_reduce: 2(n-1)/n; all_gather,
# reduce_scatter, all_to_all: (n-1)/n; broadcast, reduce, send, recv: 1}.
CASES = [
    ("all_reduce", 8, 1_000_000_000, 1.0, 1.0, 1.75),
    ("all_reduce", 4, 2_000_000_000, 1.0, 2.0, 3.0),
    ("all_reduce", 2, 500_000_000, 0.5, 1.0, 1.0),
    ("all_gather", 8, 8_000_000_000, 2.0, 4.0, 3.5),
    ("all_gather", 2, 1_000_000_000, 1.0, 1.0, 0.5),
    ("reduce_scatter", 4, 4_000_000_000, 1.0, 4.0, 3.0),
    ("all_to_all", 4, 1_000_000_000, 0.25, 4.0, 3.0),
    ("broadcast", 8, 3_000_000_000, 1.0, 3.0, 3.0),
    ("reduce", 8, 3_000_000_000, 1.0, 3.0, 3.0),
    ("send", 2, 1_000_000, 0.001, 1.0, 1.0),
    ("recv", 2, 1_000_000, 0.002, 0.5, 0.5),
    ("all_reduce", 1, 1_000_000, 0.001, 1.0, 0.0),
]


@pytest.mark.parametrize(("op", "n", "size", "t", "algbw", "busbw"), CASES)
def test_bandwidth_table(op: str, n: int, size: int, t: float, algbw: float, busbw: float) -> None:
    assert algbw_GBps(size, t) == pytest.approx(algbw)
    assert busbw_GBps(op, n, size, t) == pytest.approx(busbw)


def test_zero_time_gives_zero_bandwidth() -> None:
    assert algbw_GBps(100, 0.0) == 0.0


@pytest.mark.parametrize(
    ("op", "n", "ring", "study_b"),
    [
        ("all_reduce", 4, 1.5, 2.0),
        ("all_gather", 4, 0.75, 1.0),
        ("reduce_scatter", 8, 0.875, 1.0),
        ("broadcast", 4, 1.0, 1.0),
        ("send", 2, 1.0, 1.0),
    ],
)
def test_wire_conventions(op: str, n: int, ring: float, study_b: float) -> None:
    assert wire_factor(op, n, "ring") == pytest.approx(ring)
    assert wire_factor(op, n, "study_b") == pytest.approx(study_b)
    with pytest.raises(ValueError):
        wire_factor(op, n, "other")


def test_op_table_uses_group_size_not_world_size(tmp_path: Path) -> None:
    """8 ranks; an all-reduce in the world and one in a 2-rank sub-group, same S and t."""
    world = list(range(8))
    events = []
    for r in world:
        events.append(ev(r, "all_reduce", 0, 1000, pg="0", pg_ranks=world, size=1_000_000))
        if r in (2, 5):
            events.append(ev(r, "all_reduce", 2000, 3000, pg="7", pg_ranks=[2, 5], size=1_000_000))
        if r < 4:
            events.append(
                ev(r, "all_gather", 4000, 4500, pg="8", pg_ranks=[0, 1, 2, 3], size=2_000_000)
            )
    run = open_run(write_run(tmp_path / "run", events, world_size=8))
    rows = {(r["op"], r["pg_name"]): r for r in op_table(run).to_pylist()}
    world_ar = rows[("all_reduce", "0")]
    assert (world_ar["ranks"], world_ar["count"], world_ar["bytes"]) == (8, 8, 8_000_000)
    assert world_ar["time_s"] == pytest.approx(8e-3)
    assert world_ar["algbw_GBps"] == pytest.approx(1.0)  # 1 MB / 1 ms
    assert world_ar["busbw_GBps"] == pytest.approx(1.75)  # 2*7/8
    sub = rows[("all_reduce", "7")]
    assert (sub["group_size"], sub["ranks"], sub["count"]) == (2, 2, 2)
    assert sub["busbw_GBps"] == pytest.approx(1.0)  # 2*1/2, not 2*7/8
    ag = rows[("all_gather", "8")]
    assert ag["algbw_GBps"] == pytest.approx(4.0)  # 2 MB / 0.5 ms
    assert ag["busbw_GBps"] == pytest.approx(3.0)  # (4-1)/4
    assert ag["avg_latency_s"] == pytest.approx(5e-4)


def test_bus_factor_of_object_variants() -> None:
    assert bus_factor("all_gather_object", 4) == pytest.approx(0.75)
    assert bus_factor("broadcast_object", 4) == 1.0
    assert bus_factor("barrier", 4) == 1.0
