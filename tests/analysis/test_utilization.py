"""Link utilization from events (bytes conserved over bins) and from NIC counters."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.analysis import event_utilization, nic_utilization, open_run, utilization_summary
from commlens.netem.nic import NIC_FILE, SCHEMA
from tests.analysis.synth import T0_NS, ev, write_run


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
    assert summary["node 0"]["bytes"] == pytest.approx(2_500_000)
