"""Link utilization from events (bytes conserved over bins) and from NIC counters."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.analysis import event_utilization, nic_utilization, open_run, utilization_summary
from commlens.trace.layout import NIC_FILE
from commlens.trace.nic import SCHEMA
from commlens.trace.synthetic import T0_NS, ev, write_run


def _run(tmp_path: Path) -> Path:
    events = [
        # 1 MB all-reduce in 2 ranks (wire = 1 MB each) over 1 ms: 8 Gbit/s while it runs
        ev(0, "all_reduce", 0, 1000, size=1_000_000),
        ev(1, "all_reduce", 0, 1000, size=1_000_000),
        # 4 MB all-gather (wire 2 MB) over [3000, 4000] on rank 0 only
        ev(0, "all_gather", 3000, 4000, size=4_000_000),
        ev(1, "barrier", 3000, 4000, size=0),
    ]
    return write_run(tmp_path / "run", events, world_size=2)


def test_event_bytes_are_conserved_and_rates_right(tmp_path: Path) -> None:
    run = open_run(_run(tmp_path))
    table = event_utilization(run, bins=8)  # span 4 ms -> 0.5 ms bins
    rows = table.to_pylist()
    assert rows[0]["bin_s"] == pytest.approx(5e-4)
    per_rank = {r: sum(x["wire_bytes"] for x in rows if x["rank"] == r) for r in (0, 1)}
    assert per_rank[0] == pytest.approx(3_000_000)
    assert per_rank[1] == pytest.approx(1_000_000)
    first = next(x for x in rows if x["rank"] == 0 and x["t_s"] == 0.0)
    assert first["gbit_s"] == pytest.approx(8.0)
    last = next(x for x in rows if x["rank"] == 0 and x["t_s"] == pytest.approx(3.5e-3))
    assert last["gbit_s"] == pytest.approx(16.0)
    summary = {r["unit"]: r for r in utilization_summary(run, bins=8).to_pylist()}
    assert summary["rank 0"]["peak_gbit_s"] == pytest.approx(16.0)
    assert summary["rank 0"]["mean_gbit_s"] == pytest.approx(3e6 * 8 / 4e-3 / 1e9)
    assert nic_utilization(run) is None


def test_nic_counters(tmp_path: Path) -> None:
    path = _run(tmp_path)
    rows = []
    for i in range(3):  # node 0 sends 1.25 MB per 10 ms = 1 Gbit/s; node 1 idle
        t = T0_NS + i * 10_000_000
        rows.append({"t_ns": t, "node": 0, "iface": "v0", "tx_bytes": i * 1_250_000, "rx_bytes": 0})
        rows.append({"t_ns": t, "node": 1, "iface": "v1", "tx_bytes": 0, "rx_bytes": i * 1_250_000})
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path / NIC_FILE)
    run = open_run(path)
    nic = nic_utilization(run)
    assert nic is not None
    node0 = [r for r in nic.to_pylist() if r["node"] == 0]
    assert [r["t_s"] for r in node0] == pytest.approx([0.01, 0.02])
    assert all(r["tx_gbit_s"] == pytest.approx(1.0) for r in node0)
    node1 = [r for r in nic.to_pylist() if r["node"] == 1]
    assert all(r["rx_gbit_s"] == pytest.approx(1.0) and r["tx_gbit_s"] == 0 for r in node1)
    summary = {r["unit"]: r for r in utilization_summary(run).to_pylist()}
    assert summary["node 0"]["source"] == "nic tx"
    assert summary["node 0"]["peak_gbit_s"] == pytest.approx(1.0)
    # the job's window is its 4 ms of ops: 4 ms of the first 10 ms interval's bytes
    assert summary["node 0"]["bytes"] == pytest.approx(500_000)
    assert summary["node 0"]["mean_gbit_s"] == pytest.approx(1.0)


def test_a_mean_is_over_the_jobs_window_not_the_idle_counters_around_it(tmp_path: Path) -> None:
    """Counters sampled every 4 ms from 40 ms before the job to 40 ms after it: the mean
    is the rate while the job ran (1 Gbit/s), not the bytes over the whole sampled time."""
    path = _run(tmp_path)
    rows = []
    for i, t_ms in enumerate(range(-40, 48, 4)):
        sent = 500_000 if t_ms >= 4 else 0
        t = T0_NS + t_ms * 1_000_000
        rows.append({"t_ns": t, "node": 0, "iface": "v0", "tx_bytes": sent, "rx_bytes": i})
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path / NIC_FILE)
    summary = {r["unit"]: r for r in utilization_summary(open_run(path)).to_pylist()}
    assert summary["node 0"]["mean_gbit_s"] == pytest.approx(1.0)
    assert summary["node 0"]["bytes"] == pytest.approx(500_000)


def test_a_sample_a_moment_after_the_last_is_merged_not_read_as_a_rate(tmp_path: Path) -> None:
    """The stop sample 0.2 ms after the last periodic one, with 100 kB more counted: as its
    own interval that reads 4 Gbit/s on a link that carried 1 Gbit/s."""
    path = _run(tmp_path)
    times = [0, 10_000_000, 20_000_000, 20_200_000]
    sent = [0, 1_250_000, 2_500_000, 2_600_000]
    rows = [
        {"t_ns": T0_NS + t, "node": 0, "iface": "v0", "tx_bytes": b, "rx_bytes": 0}
        for t, b in zip(times, sent, strict=True)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path / NIC_FILE)
    nic = nic_utilization(open_run(path))
    assert nic is not None
    assert nic.column("tx_bytes").to_pylist() == [1_250_000, 1_350_000]
    assert max(nic.column("tx_gbit_s").to_pylist()) < 1.1


def test_only_the_bytes_that_cross_nodes_count_as_inter_node(tmp_path: Path) -> None:
    """4 ranks, 2 per node. An all-reduce of 1 MB over all four: in the ring 0→1→2→3→0
    only ranks 1 and 3 send to another node, 1.5 MB each (2(n-1)/n S); a send from
    rank 0 to rank 1 stays on node 0, one from rank 0 to rank 2 crosses."""
    from commlens.analysis.rankpass import rank_pass
    from commlens.analysis.utilization import inter_node_utilization, rank_nodes

    world = [0, 1, 2, 3]
    events = [ev(r, "all_reduce", 0, 1000, size=1_000_000, pg_ranks=world) for r in world]
    events += [
        ev(0, "send", 2000, 3000, size=300_000, pg="9", pg_ranks=world, peer=1),
        ev(0, "send", 3000, 4000, size=200_000, pg="9", pg_ranks=world, peer=2),
        ev(2, "recv", 3000, 4000, size=200_000, pg="9", pg_ranks=world, peer=0),
    ]
    meta = {r: {"launch": {"node": str(r // 2)}} for r in world}
    view = open_run(write_run(tmp_path / "run", events, world_size=4, rank_meta=meta))
    assert rank_nodes(view.manifest) == {0: 0, 1: 0, 2: 1, 3: 1}
    rp = rank_pass(view, util_bins=8, nic=True)
    inter = inter_node_utilization(rp)
    assert inter is not None
    by_node = {n: sum(r["wire_bytes"] for r in inter.to_pylist() if r["node"] == n) for n in (0, 1)}
    assert by_node[0] == pytest.approx(1_500_000 + 200_000)
    assert by_node[1] == pytest.approx(1_500_000)
    one_node = open_run(write_run(tmp_path / "one", events, world_size=4))
    assert inter_node_utilization(rank_pass(one_node, util_bins=8)) is None
