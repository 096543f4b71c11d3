"""``commlens net cleanup`` removes what commlens's records list, and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from commlens.cli.main import main
from commlens.errors import CommlensError
from commlens.netem import EmulatedCluster, cleanup, cluster, iproute
from commlens.netem.state import RunRecord, claim_run, forget_owner, load_record, record_path
from tests.netem.helpers import needs_netns, wait_for

FAKE_ID = "abc123"
LOOKALIKE_ID = "abc124"
DEAD_PID = 2**22 + 7  # above the default pid_max: never running


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def _record_claims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run ids the clusters made in this test claim, in order."""
    claimed: list[str] = []
    real_claim = cluster.claim_run

    def claim(run_id: str, pid: int) -> RunRecord:
        claimed.append(run_id)
        return real_claim(run_id, pid)

    monkeypatch.setattr(cluster, "claim_run", claim)
    return claimed


def _delete(namespaces: list[str], ifaces: list[str]) -> None:
    for iface in ifaces:
        iproute.run(["ip", "link", "del", iface], check=False)
    for ns in namespaces:
        iproute.run(["ip", "netns", "del", ns], check=False)


@pytest.fixture
def recorded_leftovers() -> Iterator[list[str]]:
    """What a run killed together with its reaper leaves: 2 nodes, all recorded."""
    record = claim_run(FAKE_ID, DEAD_PID)
    run = iproute.run
    bridge = iproute.bridge_name(FAKE_ID)
    record.add("bridges", bridge)
    run(["ip", "link", "add", bridge, "type", "bridge"])
    made = [f"bridge {bridge}"]
    for k in range(2):
        ns = iproute.namespace_name(FAKE_ID, k)
        record.add("namespaces", ns)
        run(["ip", "netns", "add", ns])
        host, node = iproute.host_veth(FAKE_ID, k), iproute.node_veth(FAKE_ID, k)
        record.add("veths", host)
        run(["ip", "link", "add", host, "type", "veth", "peer", "name", node, "netns", ns])
        made += [f"namespace {ns}", f"veth {host}"]
    try:
        yield made
    finally:
        netns, ifaces = iproute.objects_of(FAKE_ID)
        _delete(netns, ifaces)
        forget_owner(FAKE_ID)


@pytest.mark.root
@needs_netns
def test_cleanup_removes_only_recorded_objects(
    recorded_leftovers: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Matches commlens's naming pattern exactly, but no record says commlens made it.
    lookalike = iproute.bridge_name(LOOKALIKE_ID)
    assert iproute.IFACE_RE.match(lookalike)
    iproute.run(["ip", "link", "add", lookalike, "type", "bridge"])
    # Lookalikes of the prefix only.
    foreign_ns, foreign_if = "clabc123-n0", "clxyzbr"
    iproute.run(["ip", "netns", "add", foreign_ns])
    iproute.run(["ip", "link", "add", foreign_if, "type", "bridge"])
    try:
        assert main(["net", "cleanup"]) == 0
        out = capsys.readouterr().out
        for what in recorded_leftovers:
            assert f"removed: {what}\n" in out, (what, out)
        assert f"left alone: bridge {lookalike} (no commlens record)\n" in out, out
        assert iproute.objects_of(FAKE_ID) == ([], [])
        assert load_record(FAKE_ID) is None and not record_path(FAKE_ID).exists()
        assert lookalike in iproute.list_interfaces()
        assert foreign_ns in iproute.list_namespaces()
        assert foreign_if in iproute.list_interfaces()
    finally:
        _delete([foreign_ns], [lookalike, foreign_if])


@pytest.mark.root
@needs_netns
def test_cleanup_leaves_an_object_no_longer_of_the_recorded_kind() -> None:
    """A name in a record that now belongs to some other kind of interface is not ours."""
    record = claim_run(FAKE_ID, DEAD_PID)
    bridge = iproute.bridge_name(FAKE_ID)
    record.add("bridges", bridge)
    iproute.run(["ip", "link", "add", bridge, "type", "veth", "peer", "name", "clpeer0"])
    try:
        report = cleanup()
        assert f"bridge {bridge} (now a veth interface, not commlens's)" in report.left
        assert bridge in iproute.list_interfaces()
        assert load_record(FAKE_ID) is None
    finally:
        _delete([], [bridge])
        forget_owner(FAKE_ID)


_OWNER = """
import json, sys, time
from commlens.netem import EmulatedCluster
with EmulatedCluster(2, "1gbit") as c:
    print(json.dumps({"run_id": c.run_id, "reaper": c._reaper.pid}), flush=True)
    time.sleep(120)
"""


@pytest.mark.root
@needs_netns
def test_cleanup_removes_a_cluster_whose_owner_and_reaper_were_killed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    try:
        info = json.loads(owner.stdout.readline())
        run_id, reaper = info["run_id"], info["reaper"]
        os.kill(reaper, signal.SIGKILL)  # first, or it would clean up after the owner
        wait_for(lambda: _dead(reaper), 10, "the reaper to die")
    finally:
        owner.kill()
        owner.wait(timeout=10)
        owner.stdout.close()
    netns, ifaces = iproute.objects_of(run_id)
    assert len(netns) == 2 and len(ifaces) == 3  # 2 veths + the bridge, nobody removed them
    try:
        assert main(["net", "cleanup"]) == 0
        out = capsys.readouterr().out
        assert iproute.objects_of(run_id) == ([], [])
        assert load_record(run_id) is None
        for name in [*netns, *ifaces]:
            assert name in out
        assert f"left alone: run {run_id}" not in out
    finally:
        netns, ifaces = iproute.objects_of(run_id)
        _delete(netns, ifaces)
        forget_owner(run_id)


@pytest.mark.root
@needs_netns
def test_cleanup_spares_a_run_in_progress_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with EmulatedCluster(2, "1gbit") as c:
        assert main(["net", "cleanup"]) == 0
        out = capsys.readouterr().out
        line = (
            f"left alone: run {c.run_id} (owner pid {os.getpid()} still alive; --force to remove)"
        )
        assert line in out, out
        assert c.run_id not in out.replace(line, "")  # none of its objects was removed
        assert len(iproute.objects_of(c.run_id)[0]) == 2
    assert c.run_id not in iproute.run_ids_present()


@pytest.mark.root
@needs_netns
def test_each_object_is_recorded_before_it_is_created(monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = iproute.run
    claimed = _record_claims(monkeypatch)
    checked: list[str] = []

    def run(args: list[str], *, check: bool = True) -> str:
        if args[:3] in (["ip", "link", "add"], ["ip", "netns", "add"]):
            record = load_record(claimed[0])
            assert record is not None and args[3] in [n for _, n in record.objects()], args
            assert args[3] not in iproute.list_interfaces() + iproute.list_namespaces()
            checked.append(args[3])
        return real_run(args, check=check)

    monkeypatch.setattr(iproute, "run", run)
    with EmulatedCluster(2) as c:
        record = load_record(c.run_id)
        assert record is not None and record.owner_pid == os.getpid()
        assert record.bridges == [iproute.bridge_name(c.run_id)]
        assert record.namespaces == [c.namespace(0), c.namespace(1)]
        assert record.veths == c.host_ifaces()
    assert len(checked) == 5
    assert load_record(c.run_id) is None and c.run_id not in iproute.run_ids_present()


@pytest.mark.root
@needs_netns
def test_a_tc_failure_during_setup_is_one_line_and_tears_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster.EmulatedCluster, "_queue_bytes", lambda self: "soon")
    claimed = _record_claims(monkeypatch)
    with pytest.raises(iproute.IpError) as err:
        with EmulatedCluster(2, "1gbit"):
            pass
    message = str(err.value)
    assert isinstance(err.value, CommlensError)
    assert "\n" not in message and message.startswith("`tc qdisc add dev cl"), message
    assert 'illegal value for "limit"' in message.lower(), message
    (run_id,) = claimed
    assert iproute.objects_of(run_id) == ([], [])
    assert load_record(run_id) is None


def test_an_ip_failure_names_the_command_and_its_first_error_line() -> None:
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2 (ip)")
    with pytest.raises(CommlensError) as err:
        iproute.run(["ip", "link", "show", "clnosuch0"])
    message = str(err.value)
    assert message.startswith("`ip link show clnosuch0` failed: ") and "\n" not in message
    assert "clnosuch0" in message.split("failed: ", 1)[1]


def test_a_missing_tool_is_one_line() -> None:
    with pytest.raises(iproute.IpError, match="could not start") as err:
        iproute.run(["/nonexistent/tc", "qdisc", "show"])
    assert "\n" not in str(err.value)


def test_cleanup_without_root_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["net", "cleanup"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "root" in err


@pytest.mark.root
@needs_netns
def test_an_unreadable_record_is_reported_and_kept() -> None:
    path = record_path(FAKE_ID)
    path.write_text("{not json")
    try:
        report = cleanup()
        assert f"record {path} (unreadable; its objects are unknown)" in report.left
        assert path.exists()
    finally:
        path.unlink(missing_ok=True)
