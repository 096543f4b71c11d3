"""Per-op time a reader can add up: service on the group's queue, wait for peers, transfer.

Synthetic runs with exact times, and a probe on real gloo ranks: async
all-gathers issued back to back on one group and waited for at the end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from commlens.analysis import breakdown, matched_events, op_table, open_run, skew_table, step_table
from commlens.analysis.coverage import headline_coverage
from commlens.analysis.rankpass import rank_pass
from commlens.report.build import build_report
from commlens.trace.synthetic import ev, write_run
from tests.distributed import run_ranks

DATA = Path(__file__).parent.parent / "data"


def _queued_run(tmp_path: Path) -> Path:
    """Three async all-gathers issued 1 µs apart, each served 100 µs, one after another
    (one server per group: an NCCL run)."""
    events = [
        ev(r, "all_gather", i, 100 * (i + 1), is_async=True, wait_us=0)
        for r in (0, 1)
        for i in range(3)
    ]
    return write_run(tmp_path / "run", events, world_size=2, extra={"backend": "nccl"})


def test_service_times_of_queued_ops_add_up_to_the_union(tmp_path: Path) -> None:
    rp = rank_pass(_queued_run(tmp_path), match=True)
    row = op_table(rp).to_pylist()[0]
    assert row["service_s"] == pytest.approx(2 * 300e-6)  # = the union on each rank
    assert row["time_s"] == pytest.approx(2 * (100 + 199 + 298) * 1e-6)  # issue -> end
    assert row["queue_s"] == pytest.approx(row["time_s"] - row["service_s"])
    comm = sum(step_table(rp).column("comm_s").to_pylist())
    assert row["service_s"] == pytest.approx(comm)
    assert row["transfer_s"] == pytest.approx(row["service_s"])  # both ranks ready together
    # bandwidth over transfer time, the first call left out: 4096 B per 100 µs
    assert row["algbw_GBps"] == pytest.approx(4096 / 100e-6 / 1e9)


def test_gloo_serves_two_ops_of_a_group_at_once_and_they_share_the_time(
    tmp_path: Path,
) -> None:
    # two async all-reduces issued together end together at 200 µs (each alone: 100 µs),
    # a third queued behind them runs alone from 200 to 300 µs
    events = [
        e
        for r in (0, 1)
        for e in (
            ev(r, "all_reduce", 0, 200, is_async=True, wait_us=0, module="a"),
            ev(r, "all_reduce", 1, 200, is_async=True, wait_us=0, module="b"),
            ev(r, "all_reduce", 2, 300, is_async=True, wait_us=0, module="c"),
        )
    ]
    run = write_run(tmp_path / "run", events, world_size=2)  # backend gloo
    rows = {r["module"]: r for r in breakdown.module_table(run).to_pylist()}
    assert rows["a"]["service_s"] == pytest.approx(2 * (1 + 199 / 2) * 1e-6)
    assert rows["b"]["service_s"] == pytest.approx(2 * 199 / 2 * 1e-6)
    assert rows["c"]["service_s"] == pytest.approx(2 * 100e-6)  # waited for a server
    assert sum(r["service_s"] for r in rows.values()) == pytest.approx(2 * 300e-6)  # union
    for r in matched_events(run).to_pylist():
        assert r["queue_s"] + r["wait_last_s"] + r["transfer_s"] == pytest.approx(r["duration_s"])
    nccl = write_run(tmp_path / "nccl", events, world_size=2, extra={"backend": "nccl"})
    one = {r["module"]: r["service_s"] for r in breakdown.module_table(nccl).to_pylist()}
    assert one == pytest.approx({"a": 400e-6, "b": 0.0, "c": 200e-6})  # one server


def test_wait_and_transfer_never_negative_under_clock_skew(tmp_path: Path) -> None:
    # rank 1 is seen arriving after the root's broadcast ended (skew beyond the measurement)
    events = [
        ev(0, "broadcast", 0, 50),
        ev(1, "broadcast", 200, 260),
        ev(0, "all_reduce", 300, 400),
        ev(1, "all_reduce", 350, 400),
    ]
    run = write_run(tmp_path / "run", events, world_size=2)
    rows = matched_events(run).to_pylist()
    for r in rows:
        assert min(r["queue_s"], r["wait_last_s"], r["transfer_s"]) >= 0
        assert r["queue_s"] + r["wait_last_s"] + r["transfer_s"] == pytest.approx(r["duration_s"])
    root = next(r for r in rows if r["op"] == "broadcast" and r["rank"] == 0)
    assert root["clamped"] and root["wait_last_s"] == pytest.approx(50e-6)
    assert root["transfer_s"] == 0
    late = next(r for r in rows if r["op"] == "all_reduce" and r["rank"] == 0)
    assert late["wait_last_s"] == pytest.approx(50e-6) and not late["clamped"]
    skew = {r["op"]: r for r in skew_table(run).to_pylist()}
    assert skew["broadcast"]["clamped"] == 1 and skew["all_reduce"]["clamped"] == 0
    assert all(r["transfer_s"] >= 0 and r["wait_share"] <= 1 for r in skew.values())
    with open_run(run) as view:
        doc = build_report(view)
    assert any("clock skew exceeded the measurement on 1 call" in h for h in doc.highlights)


def test_headline_leaves_out_step_0_and_says_so() -> None:
    with open_run(DATA / "tiny_run") as view:
        cover = headline_coverage(view)
        doc = build_report(view)
    assert cover.steps == (1, 2)
    assert doc.highlights[-1] == (
        "headline covers step 1 of 2 recorded steps; step 0, set-up and anything after the "
        "last step left out (--steps to change); the tables below cover every event, set-up "
        "included, and the Ranks table every recorded step: their counts can exceed the "
        "headline's"
    )
    assert doc.data["headline_steps"] == [1, 2]
    assert {s["step"] for s in doc.data["steps"]} == {0, 1}  # the tables keep every step
    with open_run(DATA / "tiny_run", steps=(0, None)) as view:
        assert headline_coverage(view).line == "headline covers steps 0–1 (--steps)"
        assert build_report(view).data["headline_steps"] is None


def _union(events: list[dict[str, Any]]) -> float:
    """Covered time of the events' [issue, end] intervals, in seconds."""
    total, reach = 0, None
    for e in sorted(events, key=lambda e: e["t_issue_ns"]):
        start = e["t_issue_ns"] if reach is None else max(e["t_issue_ns"], reach)
        total += max(e["t_end_ns"] - start, 0)
        reach = e["t_end_ns"] if reach is None else max(reach, e["t_end_ns"])
    return total / 1e9


N_GATHERS = 6
SHARD = 1 << 20  # floats per rank


def _probe(rank: int, world: int, out: str) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import commlens

    with commlens.capture(out):
        dist.init_process_group("gloo", rank=rank, world_size=world)
        shard = torch.ones(SHARD)
        outs = [torch.empty(SHARD * world) for _ in range(N_GATHERS)]
        dist.all_gather_into_tensor(outs[0], shard)  # warm-up: connections
        commlens.step()
        dist.barrier()
        t0 = time.perf_counter_ns()
        works = [dist.all_gather_into_tensor(o, shard, async_op=True) for o in outs]
        for w in works:
            w.wait()
        wall = time.perf_counter_ns() - t0
        commlens.step()
        dist.destroy_process_group()
    return {"wall_s": wall / 1e9}


def test_probe_queued_async_all_gathers_on_real_ranks(tmp_path: Path) -> None:
    out = tmp_path / "run"
    walls = [r["wall_s"] for r in run_ranks(_probe, 2, str(out))]
    with open_run(out, steps=(1, 2)) as view:
        rp = rank_pass(view, match=True)
        rows = [r for r in op_table(rp).to_pylist() if r["op"] == "all_gather"]
        events = [r for r in matched_events(rp).to_pylist() if r["op"] == "all_gather"]
    assert len(rows) == 1 and rows[0]["count"] == 2 * N_GATHERS
    for rank in (0, 1):
        mine = [e for e in events if e["rank"] == rank]
        service = sum(e["duration_s"] - e["queue_s"] for e in mine)
        # the service times add up to the union of the calls, within the observer's window
        assert service == pytest.approx(_union(mine), abs=1e-6)
        assert service <= walls[rank] * 1.01 + 1e-4
        for e in mine:
            assert min(e["queue_s"], e["wait_last_s"], e["transfer_s"]) >= 0
            parts = e["queue_s"] + e["wait_last_s"] + e["transfer_s"]
            assert parts == pytest.approx(e["duration_s"], abs=1e-9)
    assert rows[0]["service_s"] <= sum(walls) * 1.01 + 2e-4
    latency = sum(e["duration_s"] for e in events)
    assert rows[0]["service_s"] < latency / 1.5  # issue -> end counts the queue again
    assert rows[0]["transfer_s"] + rows[0]["peer_wait_s"] == pytest.approx(rows[0]["service_s"])
