"""NIC counters of emulated nodes agree with the bytes the capture says crossed them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import commlens
from commlens.cli.main import main
from commlens.netem import read_nic
from commlens.netem.nic import totals
from tests.netem.helpers import needs_netns

PROG = str(Path(__file__).with_name("commprog.py"))

# Bytes all ranks of a group of n put on the wire for one call of S bytes (ring / flat).
LINK_TOTAL = {
    "all_reduce": lambda s, n: 2 * s * (n - 1),
    "all_gather": lambda s, n: s * (n - 1),
    "reduce_scatter": lambda s, n: s * (n - 1),
    "broadcast": lambda s, n: s * (n - 1),
    "send": lambda s, n: s,
}


@pytest.mark.root
@needs_netns
def test_nic_totals_match_captured_cross_node_bytes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["trace", "--out", str(out), "--nproc", "2", "--nodes", "2", "--link", "2gbit"]
    assert main([*args, "--", sys.executable, PROG]) == 0
    run = commlens.load_run(out)
    rows = run.events.to_pylist()
    # One rank per node: every op crosses the link. Collectives appear once per
    # rank, so count them on rank 0; point-to-point once, on the sender.
    captured = 0
    for row in rows:
        op = row["op"]
        if op == "send" or (op in LINK_TOTAL and op != "send" and row["rank"] == 0):
            captured += LINK_TOTAL[op](row["size_bytes"], row["group_size"])
    assert captured >= 90 << 20  # the program moves 92 MiB
    nic = totals(read_nic(out))
    sent = sum(tx for tx, _ in nic.values())
    received = sum(rx for _, rx in nic.values())
    print(f"captured {captured} B, NIC sent {sent} B, received {received} B")
    assert abs(sent - captured) / captured < 0.10, (sent, captured)
    assert abs(received - captured) / captured < 0.10, (received, captured)
