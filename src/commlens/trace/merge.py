"""Join the per-node run directories of one job into one run (``commlens merge``).

Where the nodes of a job cannot share a file system, each writes its own run
directory (its ranks' files); the clocks are already aligned across the whole
job by the capture, so joining them is a copy, checked first:

- every input is a finished commlens run (no node or process still writing it);
- all name the same world size and backend, and the same job: the same
  ``job.json`` id, or, for inputs without one (environment-only captures),
  ranks that ran at the same time (a job's ranks all meet in its process
  group, so their spans, on the job's aligned clock, overlap);
- no rank is in two inputs;
- every file of an input named as commlens's own is a regular file (a rank's
  parts directory a real directory of such files): a symlink, a FIFO or a
  device is never followed or copied, and refuses the merge.

The inputs are only read. The joined run is built in a temporary directory
beside ``out`` and renamed onto it at the end, so ``out`` holds the whole
run or nothing. An input without node files (an environment-only capture, a
single-node ``commlens trace``) is one node, from its ``run.json``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.safefile import DATA_LIMIT, make_own_dir, open_own, read_bytes
from commlens.trace.layout import (
    JOB_FILE,
    MANIFEST,
    NIC_FILE,
    NODE_FILE,
    OWN_FILES,
    PART_FILES,
    PARTS_DIR,
    RANK_EVENTS,
    node_path,
)
from commlens.trace.live import is_live
from commlens.trace.manifest import (
    collect_rank_meta,
    merge_manifest,
    read_json,
    read_manifest,
    write_json_atomic,
)
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
    entries: list[Path] = field(default_factory=list)
    """Its files to copy, checked (:func:`_own_entries`)."""
    with_events: set[int] = field(default_factory=set)
    """Ranks with an events file or flushed parts."""
    rank_meta: dict[str, Any] = field(default_factory=dict)
    """Its ranks' metadata files, as read."""


@dataclass
class MergeResult:
    """What :func:`merge_runs` wrote."""

    out: Path
    world_size: int
    ranks: list[int]
    nodes: int
    warnings: list[str] = field(default_factory=list)


def _refuse(path: Path, entry: Path, what: str) -> UsageError:
    return UsageError(
        f"{path}: {entry.relative_to(path)} is {what}, not a file commlens wrote; "
        "refusing to merge this run"
    )


def _own_entries(path: Path) -> list[Path]:
    """The entries of ``path`` named as commlens's own, each checked to be what it claims
    (a regular file, or a parts directory of regular part files); a one-line error else."""
    entries = []
    for entry in sorted(path.iterdir()):
        parts = PARTS_DIR.match(entry.name)
        if not parts and (entry.name.startswith(".") or not OWN_FILES.match(entry.name)):
            continue  # locks, temporary files, foreign names: never read or copied
        mode = entry.lstat().st_mode
        if parts and stat.S_ISDIR(mode):
            for inner in sorted(entry.iterdir()):
                if not stat.S_ISREG(inner.lstat().st_mode) or not PART_FILES.match(inner.name):
                    raise _refuse(path, inner, _kind(inner))
        elif not stat.S_ISREG(mode):
            raise _refuse(path, entry, _kind(entry))
        entries.append(entry)
    return entries


def _kind(entry: Path) -> str:
    mode = entry.lstat().st_mode
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISREG(mode):
        return "a file of a foreign name"
    return "a directory" if stat.S_ISDIR(mode) else "a special file"


def _ranks_of(entries: list[Path]) -> tuple[set[int], set[int]]:
    """(every rank with a file among ``entries``, those with events or flushed parts)."""
    ranks: set[int] = set()
    with_events: set[int] = set()
    for entry in entries:
        if match := RANK_EVENTS.match(entry.name) or PARTS_DIR.match(entry.name):
            with_events.add(int(match.group(1)))
        elif match := _RANK_META.match(entry.name):
            ranks.add(int(match.group(1)))
    return ranks | with_events, with_events


def read_source(path: Path) -> Source:
    """``path`` checked as an input of a merge; a one-line error when it cannot be one."""
    if not path.is_dir():
        raise UsageError(f"{path}: no such run directory")
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a commlens run (no valid {MANIFEST})")
    if live_nodes(path) or is_live(path):
        raise UsageError(f"{path}: a node is still writing this run; merge it once the job ended")
    entries = _own_entries(path)
    checked = read_manifest(path)
    ranks, with_events = _ranks_of(entries)
    job = read_job(path)
    if (path / JOB_FILE).exists() and (job is None or not isinstance(job.get("id"), str)):
        raise UsageError(f"{path}: its {JOB_FILE} is unreadable or names no job id")
    return Source(
        path,
        checked.world_size,
        job,
        ranks | set(checked.ranks),
        collect_nodes(path),
        read_json(path / MANIFEST),
        entries,
        with_events,
        collect_rank_meta(path),
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
    _check_one_job(sources)
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
    eventless = sorted(set(seen) - {r for s in sources for r in s.with_events})
    if eventless:
        warnings.append(f"ranks {eventless} have no events file in any of the runs")
    if sum((s.path / NIC_FILE).exists() for s in sources) > 1:
        warnings.append(f"several runs hold {NIC_FILE}; the joined run keeps none")
    return world, warnings


def _check_one_job(sources: Sequence[Source]) -> None:
    """A one-line error unless the sources are of one job (see the module's rules)."""
    backends = {str(s.manifest.get("backend")) for s in sources if s.manifest.get("backend")}
    if len(backends) > 1:
        raise UsageError(f"the runs are of different jobs: backends {sorted(backends)}")
    ids = {s.job["id"] for s in sources if s.job}
    if len(ids) > 1:
        raise UsageError(f"the runs are of different jobs: {' and '.join(sorted(map(repr, ids)))}")
    if ids and any(s.job is None for s in sources):
        without = next(s.path for s in sources if s.job is None)
        raise UsageError(
            f"{without} has no {JOB_FILE} while another run is of job {next(iter(ids))!r}: "
            "cannot tell that they are one job"
        )
    if ids:
        return
    spans = [(s.path, span) for s in sources if (span := _span(s.rank_meta)) is not None]
    if len(spans) > 1:
        late = max(spans, key=lambda ps: ps[1][0])
        early = min(spans, key=lambda ps: ps[1][1])
        if late[1][0] > early[1][1] + SPAN_SLACK_NS:
            gap = (late[1][0] - early[1][1]) / 1e9
            raise UsageError(
                f"the runs are of different jobs: {late[0]} started {gap:.3f} s after every "
                f"rank of {early[0]} had ended (a job's ranks run at the same time)"
            )


SPAN_SLACK_NS = 1_000_000_000
"""How far spans may miss each other and still be one job (clock alignment error)."""


def _span(rank_meta: dict[str, Any]) -> tuple[int, int] | None:
    """(first start, last end) of the ranks on the job's aligned clock; None unknown."""
    starts, ends = [], []
    for meta in rank_meta.values():
        if not isinstance(meta, dict):
            continue
        clock = meta.get("clock")
        offset = clock.get("offset_ns", 0) if isinstance(clock, dict) else 0
        t0, t1 = meta.get("t_start_ns"), meta.get("t_end_ns")
        if type(offset) is int and type(t0) is int and type(t1) is int:
            starts.append(t0 + offset)
            ends.append(t1 + offset)
    return (min(starts), max(ends)) if starts else None


def _copy_files(source: Source, dst: Path) -> None:
    """The ranks' files of ``source`` into ``dst``: only its checked entries, each read
    without following a link (:func:`commlens.safefile.read_bytes`)."""
    for entry in source.entries:
        if entry.name in _REBUILT or NODE_FILE.match(entry.name):
            continue
        if PARTS_DIR.match(entry.name):
            make_own_dir(dst / entry.name)
            for inner in sorted(entry.iterdir()):
                _copy_one(inner, dst / entry.name / inner.name)
        else:
            _copy_one(entry, dst / entry.name)


def _copy_one(src: Path, dst: Path) -> None:
    data = read_bytes(src, limit=DATA_LIMIT, follow=False)
    with os.fdopen(open_own(dst), "wb") as fh:
        fh.write(data)


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
    ranks = sorted(r for s in sources for r in s.with_events)
    nodes = len(collect_nodes(out))
    return MergeResult(out, world, ranks, nodes, warnings)


def _build(tmp: Path, sources: Sequence[Source]) -> None:
    """The joined run's files in ``tmp``: every source's, a job file, one manifest.

    A node keeps its slot unless an earlier input's node has it (each node of a
    c10d job traced alone took slot 0); then it takes the next free one.
    """
    taken: set[int] = set()
    for s in sources:
        _copy_files(s, tmp)
        for key, data in (s.nodes or {"": _node_of(s)}).items():
            slot = int(key) if key and int(key) not in taken else _free(taken)
            taken.add(slot)
            write_node(node_path(tmp, slot), {**data, "slot": slot})
    nic = [e for s in sources for e in s.entries if e.name == NIC_FILE]
    if len(nic) == 1:
        _copy_one(nic[0], tmp / NIC_FILE)
    job = next((s.job for s in sources if s.job), None)
    if job is not None:
        write_json_atomic(tmp / JOB_FILE, job)
    base = {k: v for k, v in sources[0].manifest.items() if k not in ("ranks", "nodes")}
    write_json_atomic(tmp / MANIFEST, {**base, "merged_from": [str(s.path) for s in sources]})
    merge_manifest(tmp)
