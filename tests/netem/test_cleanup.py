"""``commlens net cleanup`` removes leftovers by commlens's own prefix only."""

from __future__ import annotations

import os

import pytest

from commlens.cli.main import main
from commlens.netem import EmulatedCluster, cleanup, iproute
from commlens.netem.state import forget_owner, record_owner
from tests.netem.helpers import needs_netns

FAKE_ID = "abc123"


def _make_leftovers() -> None:
    """What a launcher killed before its reaper ran would leave behind."""
    run = iproute.run
    run(["ip", "link", "add", iproute.bridge_name(FAKE_ID), "type", "bridge"])
    for k in range(2):
        ns = iproute.namespace_name(FAKE_ID, k)
        run(["ip", "netns", "add", ns])
        host, node = iproute.host_veth(FAKE_ID, k), iproute.node_veth(FAKE_ID, k)
        run(["ip", "link", "add", host, "type", "veth", "peer", "name", node, "netns", ns])
    record_owner(FAKE_ID, 2**22 + 7)  # a pid that is not running


@pytest.mark.root
@needs_netns
def test_cleanup_removes_ours_and_keeps_everything_else(capsys: pytest.CaptureFixture[str]) -> None:
    # Lookalikes that are not commlens's: same two letters, wrong pattern.
    foreign_ns, foreign_if = "clabc123-n0", "clxyzbr"
    iproute.run(["ip", "netns", "add", foreign_ns])
    iproute.run(["ip", "link", "add", foreign_if, "type", "bridge"])
    try:
        _make_leftovers()
        assert FAKE_ID in iproute.run_ids_present()
        assert main(["net", "cleanup"]) == 0
        out = capsys.readouterr().out
        assert "removed 5 leftover(s)" in out and iproute.bridge_name(FAKE_ID) in out
        assert FAKE_ID not in iproute.run_ids_present()
        assert foreign_ns in iproute.list_namespaces()
        assert foreign_if in iproute.list_interfaces()
    finally:
        iproute.remove_run(FAKE_ID)
        forget_owner(FAKE_ID)
        iproute.run(["ip", "netns", "del", foreign_ns], check=False)
        iproute.run(["ip", "link", "del", foreign_if], check=False)


@pytest.mark.root
@needs_netns
def test_cleanup_spares_a_run_in_progress() -> None:
    with EmulatedCluster(2, "1gbit") as cluster:
        assert cleanup() == []
        assert cluster.run_id in iproute.run_ids_present()
    assert cluster.run_id not in iproute.run_ids_present()


def test_cleanup_without_root_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["net", "cleanup"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "root" in err
