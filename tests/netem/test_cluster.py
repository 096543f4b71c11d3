"""Emulated clusters with real gloo ranks: shaping, loopback inside a node, teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commlens.bench.runner import BenchConfig, run_bench
from commlens.errors import UsageError
from commlens.netem import EmulatedCluster, iproute, launch_emulated, read_nic
from commlens.netem.nic import totals
from tests.netem.helpers import leftovers, needs_netns, wait_for

HERE = Path(__file__).parent
RANKPROG = str(HERE / "rankprog.py")
LAUNCHER = str(HERE / "launcher.py")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


@pytest.mark.root
@needs_netns
def test_two_nodes_at_1gbit_allreduce_busbw_matches_the_link() -> None:
    cfg = BenchConfig(
        ops=["all_reduce"], sizes=[64 << 20], nproc=2, nodes=2, link="1gbit", warmup=1, iters=3
    )
    report = run_bench(cfg)
    (row,) = report.measured
    assert row["ok"]
    # the shaper caps every call at the link rate, whatever the load; the fastest call
    # reaches most of it (the CPU work per byte of a busy 2-core machine can
    # take up to half of each call, so the floor is half the link).
    assert row["busbw_Gbit/s"] <= 1.0, row
    assert row["size_bytes"] * 8 / row["time_min_s"] / 1e9 >= 0.5, row
    assert report.topology is not None and report.topology["link"] == "1gbit"
    assert report.topology["nodes"] == 2


@pytest.mark.root
@needs_netns
def test_a_slow_link_carries_a_ring_all_reduce_at_its_rate() -> None:
    """ACKs go ahead of data: in one FIFO the other direction's data held them, and a
    2 MB 4-rank ring all-reduce at 20 Mbit/s took 1.17 times its wire time (1.03 now)."""
    size = 2 << 20
    cfg = BenchConfig(
        ops=["all_reduce"], sizes=[size], nproc=4, nodes=2, link="20mbit", warmup=1, iters=3
    )
    (row,) = run_bench(cfg).measured
    wire_s = 2 * 3 / 4 * size * 8 / 20e6  # 1.5 S on each node's link
    assert wire_s <= row["time_p50_s"] <= 1.09 * wire_s, (row["time_p50_s"], wire_s)


@pytest.mark.root
@needs_netns
def test_intra_node_traffic_is_not_shaped(tmp_path: Path) -> None:
    size = 4 << 20
    prog = [sys.executable, RANKPROG, "groups", str(tmp_path), str(size)]
    res = launch_emulated(prog, 4, 2, "200mbit", run_dir=tmp_path)
    assert res.ok, res.exit_codes
    got = json.loads((tmp_path / "result.json").read_text())
    # A 2-rank all-reduce moves S each way: at 200 Mbit/s that takes >= S·8/2e8 s.
    link_s = size * 8 / 200e6
    assert got["inter_s"] >= 0.95 * link_s, got
    assert got["intra_s"] < link_s / 2, got  # unshaped loopback: ~1/50 of it on an idle machine


@pytest.mark.root
@needs_netns
def test_cluster_describes_itself_and_leaves_nothing(tmp_path: Path) -> None:
    with EmulatedCluster(3, "500mbit") as cluster:
        topo = cluster.describe()
        run_id = cluster.run_id
        assert run_id in iproute.run_ids_present()
        netns, ifaces = iproute.objects_of(run_id)
        assert len(netns) == 3 and len(ifaces) == 4  # 3 veths + the bridge
        assert all(len(name) <= 15 for name in ifaces)
        place = cluster.placement(5, 2)
        assert place.prefix[-1] == cluster.namespace(2)
        assert place.env["MASTER_ADDR"] == cluster.master_addr == topo["node_addrs"][0]
        dev = ["dev", cluster.host_ifaces()[0]]
        qdisc = iproute.run(["tc", "qdisc", "show", *dev])
        assert "tbf 1: root" in qdisc and "rate 500Mbit" in qdisc, qdisc
        order = iproute.run(["tc", "filter", "show", *dev, "parent", "2:"])
        assert "match 00000000/0000ff80 at 0" in order and "flowid 2:10" in order, order
    assert topo["link"] == "500mbit" and topo["link_bits_per_s"] == 5e8
    assert run_id not in iproute.run_ids_present()


def _start_sleepers(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, list[int]]:
    launcher = subprocess.Popen([sys.executable, LAUNCHER, str(tmp_path), "sleep"])
    files = [tmp_path / "rank0.json", tmp_path / "rank1.json"]
    wait_for(lambda: all(f.exists() and f.read_text() for f in files), 90, "ranks to start")
    infos = [json.loads(f.read_text()) for f in files]
    run_id = infos[0]["iface"][2:8]
    assert run_id in iproute.run_ids_present()
    return launcher, run_id, [info["pid"] for info in infos]


@pytest.mark.root
@needs_netns
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_or_sigterm_of_the_launcher_removes_everything(tmp_path: Path, sig: int) -> None:
    launcher, run_id, pids = _start_sleepers(tmp_path)
    launcher.send_signal(sig)
    # 130 from the KeyboardInterrupt, or 128 + N as a shell reports signal N.
    assert launcher.wait(timeout=30) in (130, 128 + sig)
    assert run_id not in iproute.run_ids_present()
    assert not any(_alive(pid) for pid in pids)
    assert (tmp_path / "nic.parquet").exists()  # the sampler still wrote its file


@pytest.mark.root
@needs_netns
def test_sigkill_of_a_rank_removes_everything(tmp_path: Path) -> None:
    launcher, run_id, pids = _start_sleepers(tmp_path)
    os.kill(pids[1], signal.SIGKILL)
    assert launcher.wait(timeout=30) != 0
    assert run_id not in iproute.run_ids_present()
    assert not any(_alive(pid) for pid in pids)


@pytest.mark.root
@needs_netns
def test_sigkill_of_the_launcher_is_cleaned_by_the_reaper(tmp_path: Path) -> None:
    launcher, run_id, pids = _start_sleepers(tmp_path)
    launcher.kill()
    launcher.wait(timeout=10)
    wait_for(lambda: run_id not in iproute.run_ids_present(), 30, "the reaper")
    wait_for(lambda: not any(_alive(pid) for pid in pids), 10, "orphaned ranks to die")


@pytest.mark.root
@needs_netns
def test_two_emulated_runs_in_parallel(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    procs = []
    for d in dirs:
        d.mkdir()
        cmd = [sys.executable, LAUNCHER, str(d), "allreduce", str(8 << 20), "3"]
        procs.append(subprocess.Popen(cmd))
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    topos = [json.loads((d / "topology.json").read_text()) for d in dirs]
    assert topos[0]["run_id"] != topos[1]["run_id"]
    assert topos[0]["subnet"] != topos[1]["subnet"]
    for d in dirs:
        seconds = json.loads((d / "result.json").read_text())["seconds"]
        assert 8 * (8 << 20) / seconds / 1e9 <= 1.0  # each run really crossed a 1 Gbit/s link


@pytest.mark.root
@needs_netns
def test_nic_counters_match_the_all_reduce_bytes(tmp_path: Path) -> None:
    size, calls = 16 << 20, 4
    prog = [sys.executable, RANKPROG, "allreduce", str(tmp_path), str(size), str(calls)]
    started = time.monotonic()
    res = launch_emulated(prog, 2, 2, "1gbit", run_dir=tmp_path, nic_hz=20)
    elapsed = time.monotonic() - started
    assert res.ok
    table = read_nic(tmp_path)
    # Ring all-reduce on 2 ranks: each rank sends 2·S·(n−1)/n = S per call (+1 warm-up call).
    expected = (calls + 1) * size
    for node, (tx, rx) in totals(table).items():
        assert abs(tx - expected) / expected < 0.10, (node, tx, expected)
        assert abs(rx - expected) / expected < 0.10, (node, rx, expected)
    samples = table.num_rows / 2
    assert samples >= 10 * elapsed * 0.5  # ~20 Hz asked, >= 10 Hz delivered


def test_without_root_a_link_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    before = leftovers()
    with pytest.raises(UsageError) as err:
        with EmulatedCluster(2, "1gbit"):
            pass
    message = str(err.value)
    assert "\n" not in message and "root" in message and "--link" in message
    with pytest.raises(UsageError):
        launch_emulated(["true"], 2, 2, "1gbit")
    assert leftovers() == before


@pytest.mark.root
@needs_netns
def test_sigterm_while_the_cluster_is_up_still_tears_it_down() -> None:
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with EmulatedCluster(2) as cluster:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal interrupts this
    assert cluster.run_id not in iproute.run_ids_present()
    assert signal.getsignal(signal.SIGTERM) == handler
