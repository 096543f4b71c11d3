"""Suite-wide guards: no test may leave torch.distributed patched or a group alive."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch.distributed as dist

import commlens.capture as capture_pkg  # noqa: F401  (the package, not the function)
from commlens.capture.patching import is_patched
from commlens.netem.iproute import run_ids_present
from commlens.netem.state import owner_pid


def _ours(run_id: str) -> bool:
    """An emulated run this test session made: its owner is gone, us, or our child.

    Another session's live run on the same machine is not a leftover of ours.
    """
    pid = owner_pid(run_id)
    me = os.getpid()
    while pid and pid > 1:
        if pid == me:
            return True
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return owner_pid(run_id) is None


def _netns() -> set[str]:
    """Ids of emulated runs whose namespaces or interfaces exist right now."""
    try:
        return run_ids_present()
    except Exception:  # no iproute2 here: nothing can be left behind either
        return set()


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    assert not is_patched(), "torch.distributed was patched before the test"
    before = _netns() if os.geteuid() == 0 else set()
    yield
    patched = is_patched()
    alive = dist.is_available() and dist.is_initialized()
    if patched:
        from commlens.capture.patching import restore_all

        restore_all()
    if alive:
        dist.destroy_process_group()
    assert not patched, "the test left torch.distributed patched"
    assert not alive, "the test left a process group alive"
    if os.geteuid() == 0:
        left = {run_id for run_id in _netns() - before if _ours(run_id)}
        assert not left, f"the test left emulated networks behind: {sorted(left)}"
