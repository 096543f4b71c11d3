"""Suite-wide guards: no test may leave torch.distributed patched or a group alive."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch.distributed as dist

import commlens.capture as capture_pkg  # noqa: F401  (the package, not the function)
from commlens.capture.patching import is_patched
from commlens.netem.iproute import run_ids_present


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
        left = _netns() - before
        assert not left, f"the test left emulated networks behind: {sorted(left)}"
