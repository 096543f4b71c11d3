"""Join the per-node run directories of one job into one run (``commlens merge``).

Where the nodes of a job cannot share a file system, each writes its own run
directory (its ranks' files); the clocks are already aligned across the whole
job by the capture, so joining them is a copy, checked first:

- every input is a finished commlens run (no node still writing it);
- all name the same world size and, where they know it, the same job;
- no rank is in two inputs.

The inputs are only read. The joined run is built in a temporary directory
beside ``out`` and renamed onto it at the end, so ``out`` holds the whole
run or nothing. An input without node files (an environment-only capture, a
single-node ``commlens trace``) is one node, from its ``run.json``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.trace.layout import (
    JOB_FILE,
    MANIFEST,
    NIC_FILE,
    NODE_FILE,
    OWN_FILES,
    PARTS_DIR,
    RANK_EVENTS,
    node_path,
)
from commlens.trace.manifest import merge_manifest, read_json, read_manifest, write_json_atomic
from commlens.trace.nodes import collect_nodes, live_nodes, read_job, write_node
from commlens.trace.rundir import build_beside, first_foreign, is_run_dir

_RANK_META = re.compile(r"^rank-(\d{5,})\.json$")
# Files of an input that are rebuilt, not copied.
_REBUILT = (MANIFEST, JOB_FILE, NIC_FILE)


@dataclass
class Source:
    """One input directory as checked."""

    path: Path
    world_size: int | None
    job: dict[str, Any] | None
    ranks: set[int]
    nodes: dict[str, dict[str, Any]]
    manifest: dict[str, Any]


@dataclass
class MergeResult:
    """What :func:`merge_runs` wrote."""

    out: Path
    world_size: int
    ranks: list[int]
    nodes: int
    warnings: list[str] = field(default_factory=list)


def _ranks_of(path: Path, manifest_ranks: dict[int, Any]) -> set[int]:
    """Every rank with a file in ``path``: metadata, events or flushed parts."""
    ranks = set(manifest_ranks)
    for entry in path.iterdir():
        match = RANK_EVENTS.match(entry.name) or PARTS_DIR.match(entry.name)
        match = match or _RANK_META.match(entry.name)
        if match:
            ranks.add(int(match.group(1)))
    return ranks


def read_source(path: Path) -> Source:
    """``path`` checked as an input of a merge; a one-line error when it cannot be one."""
    if not path.is_dir():
        raise UsageError(f"{path}: no such run directory")
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a commlens run (no valid {MANIFEST})")
    if live_nodes(path):
        raise UsageError(f"{path}: a node is still writing this run; merge it once the job ended")
    checked = read_manifest(path)
    ranks = _ranks_of(path, checked.ranks)
    return Source(
        path,
        checked.world_size,
        read_job(path),
        ranks,
        collect_nodes(path),
        read_json(path / MANIFEST),
    )


def check_sources(sources: Sequence[Source]) -> tuple[int, list[str]]:
    """The joined run's world size, and its warnings; a one-line error for inputs of two jobs."""
    for s in sources:
        if s.world_size is None:
            raise UsageError(f"{s.path}: its world size is unknown (no rank wrote its metadata)")
    sizes = {s.world_size for s in sources}
    if len(sizes) > 1:
        shown = ", ".join(f"{s.path}: {s.world_size}" for s in sources)
        raise UsageError(f"the runs are of different jobs: world sizes differ ({shown})")
    ids = {s.job["id"] for s in sources if s.job and "id" in s.job}
    if len(ids) > 1:
        raise UsageError(f"the runs are of different jobs: {' and '.join(sorted(map(repr, ids)))}")
    world = int(sources[0].world_size or 0)
    seen: dict[int, Path] = {}
    for s in sources:
        for rank in sorted(s.ranks):
            if rank in seen:
                raise UsageError(f"rank {rank} is in both {seen[rank]} and {s.path}")
            if rank >= world:
                raise UsageError(f"{s.path}: rank {rank} is outside the world size {world}")
            seen[rank] = s.path
    warnings = []
    missing = sorted(set(range(world)) - set(seen))
    if missing:
        warnings.append(f"ranks {missing} are in none of the runs; the joined run lacks them")
    if sum((s.path / NIC_FILE).exists() for s in sources) > 1:
        warnings.append(f"several runs hold {NIC_FILE}; the joined run keeps none")
    return world, warnings


def _copy_files(src: Path, dst: Path) -> None:
    """The ranks' files of ``src`` into ``dst`` (never a foreign file)."""
    for entry in sorted(src.iterdir()):
        if entry.name in _REBUILT or NODE_FILE.match(entry.name) or entry.is_symlink():
            continue
        if entry.is_dir() and PARTS_DIR.match(entry.name):
            shutil.copytree(entry, dst / entry.name)
        elif entry.is_file() and OWN_FILES.match(entry.name) and not entry.name.startswith("."):
            shutil.copy2(entry, dst / entry.name)


def _node_of(source: Source) -> dict[str, Any]:
    """The one node a source without node files stands for."""
    launcher = source.manifest.get("launcher")
    launcher = launcher if isinstance(launcher, dict) else {}
    ranks = source.manifest.get("ranks")
    hosts = sorted(
        {
            str(m.get("host"))
            for m in (ranks or {}).values()
            if isinstance(m, dict) and m.get("host")
        }
    )
    return {
        "host": ",".join(hosts),
        "command": source.manifest.get("command"),
        "exit_code": launcher.get("exit_code"),
        "status": "ended",
        "source": str(source.path),
    }


def _free(taken: set[int]) -> int:
    return next(k for k in range(len(taken) + 1) if k not in taken)


def _check_out(out: Path, sources: Sequence[Source]) -> None:
    real = Path(os.path.realpath(out))
    for s in sources:
        top = Path(os.path.realpath(s.path))
        if real == top or top in real.parents or real in top.parents:
            raise UsageError(f"{out}: overlaps the input {s.path}; pick another directory")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} exists and is not a directory; pick a new directory")
    if out.is_dir() and first_foreign(out, lambda e: e) is not None:
        raise UsageError(f"{out} already exists and is not empty; pick a new directory")
    if len({os.path.realpath(s.path) for s in sources}) < len(sources):
        raise UsageError("a run directory is given twice")


def merge_runs(out: Path, dirs: Sequence[Path]) -> MergeResult:
    """Join the runs in ``dirs`` into the new run ``out``; the inputs are only read."""
    sources = [read_source(Path(d)) for d in dirs]
    _check_out(out, sources)
    world, warnings = check_sources(sources)
    build_beside(out, lambda tmp: _build(tmp, sources), "the joined run", "merge")
    ranks = sorted(r for s in sources for r in s.ranks)
    nodes = len(collect_nodes(out))
    return MergeResult(out, world, ranks, nodes, warnings)


def _build(tmp: Path, sources: Sequence[Source]) -> None:
    """The joined run's files in ``tmp``: every source's, a job file, one manifest.

    A node keeps its slot unless an earlier input's node has it (each node of a
    c10d job traced alone took slot 0); then it takes the next free one.
    """
    taken: set[int] = set()
    for s in sources:
        _copy_files(s.path, tmp)
        for key, data in (s.nodes or {"": _node_of(s)}).items():
            slot = int(key) if key and int(key) not in taken else _free(taken)
            taken.add(slot)
            write_node(node_path(tmp, slot), {**data, "slot": slot})
    nic = [s.path / NIC_FILE for s in sources if (s.path / NIC_FILE).exists()]
    if len(nic) == 1:
        shutil.copy2(nic[0], tmp / NIC_FILE)
    job = next((s.job for s in sources if s.job), None)
    if job is not None:
        write_json_atomic(tmp / JOB_FILE, job)
    base = {k: v for k, v in sources[0].manifest.items() if k not in ("ranks", "nodes")}
    write_json_atomic(tmp / MANIFEST, {**base, "merged_from": [str(s.path) for s in sources]})
    merge_manifest(tmp)
