"""Suite-wide guards: no test may leave torch.distributed patched or a group alive.

Also the ``readonly_dir`` fixture: folders no one can write to, root included."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

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


@pytest.fixture
def readonly_dir() -> Iterator[Callable[[Path], Path]]:
    """Mounts a read-only tmpfs on a folder (made if missing) and returns the folder;
    each is unmounted at teardown. Skips the test unless root may mount here."""
    mounted: list[Path] = []

    def mount(path: Path) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a read-only tmpfs needs root and mount(8)")
        path.mkdir(parents=True, exist_ok=True)
        cmd = ["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)
