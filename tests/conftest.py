"""Suite-wide guards: no test may leave torch.distributed patched or a group alive."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
import torch.distributed as dist

import commlens.capture as capture_pkg  # noqa: F401  (the package, not the function)
from commlens.capture.patching import is_patched


def _netns() -> set[str]:
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {line.split()[0] for line in out.stdout.splitlines() if line.startswith("cl")}


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
        assert not left, f"the test left network namespaces behind: {sorted(left)}"
