"""Suite-wide guards: no test may leave torch.distributed patched or a group alive.

Also the ``readonly_dir`` fixture: folders no one can write to, root included; and
``shared_runs`` (tests/runs.py): the session's real captured runs, made once."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

import commlens.capture as capture_pkg  # noqa: F401  (the package, not the function)
from commlens.capture.patching import is_patched
from commlens.netem.iproute import run_ids_present
from commlens.netem.state import load_record
from tests.runs import shared_runs  # noqa: F401  (a fixture for the whole suite)


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
def _no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    assert not is_patched(), "torch.distributed was patched before the test"
    # a unit-layer test starts no process (:func:`_guarded`), so it makes no namespace
    netns = os.geteuid() == 0 and not _unit_layer(request.node)
    before = _netns() if netns else set()
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
    if netns:
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


# --- the two layers: ``pytest -m "not e2e"`` runs only tests that spawn no process ---

_SPAWNS = re.compile(
    r"\bsubprocess\b|multiprocessing|\bmp\.spawn\b|\bPopen\b|os\.fork\b|torchrun|"
    r"tests\.distributed|\bspawn_ranks\b|\brun_ranks\b|EmulatedCluster|launch_job|"
    r"""main\(\s*\[\s*["'](?:run|trace|bench|sweep|launch|demo)["']|"""
    r"""\[\s*["'](?:run|trace|bench|sweep|launch|demo)["']\s*,\s*["']--(?:out|nproc)"""
)
"""What in a test module, a fixture or a tests/ helper it imports starts a process:
ranks, a command that launches them, a CLI in a subprocess, torchrun, namespaces."""
_E2E_DIRS = ("frameworks", "netem", "launch", "gpu")
"""Folders whose every test starts processes (framework jobs, namespaces, launchers, GPUs)."""


def _spawns(path: Path, seen: set[Path] | None = None) -> bool:
    """Whether the test file at ``path``, or a helper module of tests/ it imports, starts
    a process (by :data:`_SPAWNS`)."""
    seen = set() if seen is None else seen
    if path in seen or not path.is_file() or path.name == "conftest.py":  # its fixtures: below
        return False
    seen.add(path)
    text = path.read_text(encoding="utf-8")
    if _SPAWNS.search(text):
        return True
    root = Path(__file__).resolve().parent.parent
    for mod in re.findall(r"^\s*(?:from|import) (tests(?:\.\w+)+)", text, re.M):
        if _spawns(root / (mod.replace(".", "/") + ".py"), seen):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``e2e`` every test that starts processes: its folder (:data:`_E2E_DIRS`), its
    module or a tests/ helper it imports, or one of its fixtures (by :data:`_SPAWNS`)."""
    spawning: dict[Path, bool] = {}
    for item in items:
        path = Path(str(item.path))
        if path not in spawning:
            spawning[path] = path.parent.name in _E2E_DIRS or _spawns(path)
        e2e = spawning[path]
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            if e2e or info is None:
                break
            for fdef in info.name2fixturedefs.get(name, ()):
                if name in ("_no_leftovers",):  # the suite's own guard: ip(8) as root
                    continue
                try:
                    source = inspect.getsource(fdef.func)
                except (OSError, TypeError):
                    continue
                module = inspect.getsourcefile(fdef.func)
                if _SPAWNS.search(source) or (
                    module is not None
                    and Path(module).name != "conftest.py"
                    and _spawns(Path(module))
                ):
                    e2e = True
        if e2e:
            item.add_marker(pytest.mark.e2e)


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise AssertionError(
        "this test starts a process: it belongs to the e2e layer (tests/conftest.py)"
    )


def _unit_layer(item: pytest.Item) -> bool:
    """Whether ``item`` runs in the unit layer (``-m "not e2e"``, not marked e2e)."""
    markexpr = item.config.option.markexpr or ""
    return "not e2e" in markexpr and not item.get_closest_marker("e2e")


def _guarded(item: pytest.Item) -> Iterator[None]:
    """Under ``-m "not e2e"`` a test that starts a process, in its body or in a fixture
    it sets up, fails naming the layer it belongs to: the marking above is checked by
    every run of the unit layer."""
    if not _unit_layer(item):
        return (yield)
    import multiprocessing.util

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess.Popen, "_execute_child", _refuse)
        mp.setattr(os, "fork", _refuse)
        mp.setattr(multiprocessing.util, "spawnv_passfds", _refuse)
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[object]:
    """A test's own fixtures are guarded as its body is; the suite's guards in conftest.py
    files (which census namespaces with ip(8)) are not."""
    item = getattr(request, "_pyfuncitem", None)
    module = inspect.getsourcefile(fixturedef.func) or ""
    if item is None or Path(module).name == "conftest.py":
        return (yield)
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item))
