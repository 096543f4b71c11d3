"""Shared by the netem and bench tests: the root/netns skip, the leftover check and
a polling wait."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest


def _netns_reason() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, check=False)
    if probe.returncode != 0:
        return "ip netns does not work here"
    return None


NETNS_REASON = _netns_reason()
needs_netns = pytest.mark.skipif(NETNS_REASON is not None, reason=NETNS_REASON or "")


def leftovers() -> set[str]:
    """Run ids of emulated runs that still have a namespace or an interface, except
    runs in progress in other processes (the checkout is shared with other jobs)."""
    if NETNS_REASON is not None:
        return set()
    from commlens.netem.iproute import run_ids_present
    from commlens.netem.state import owner_pid

    return {i for i in run_ids_present() if owner_pid(i) in (None, os.getpid())}


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    """Polls ``predicate`` until it is true; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
