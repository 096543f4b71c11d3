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
from commlens.netem.state import load_record


def made_here(run_id: str) -> bool:
    """Whether this test session (this process or a descendant, gone or not) made the
    emulated run ``run_id``: its record's lineage, written when the run was claimed,
    holds this process. A run of another job on the machine is never ours, whether its
    owner still runs or not, nor one without a record (the cluster writes it before
    it creates anything)."""
    record = load_record(run_id)
    return record is not None and record.made_by(os.getpid())


def _netns() -> set[str]:
    """Ids of emulated runs whose namespaces or interfaces exist right now."""
    try:
        return run_ids_present()
    except Exception:  # no iproute2 here: nothing can be left behind either
        return set()


def leftovers(before: set[str]) -> set[str]:
    """Emulated runs that exist now, did not before, and this session made."""
    return {run_id for run_id in _netns() - before if made_here(run_id)}


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
        left = leftovers(before)
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
