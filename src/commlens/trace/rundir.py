"""Prepare an output directory for a run, replacing only what commlens wrote.

``--force`` replaces a directory only when it is recognisably a commlens run
(its ``run.json`` parses and names the commlens run format), and then deletes
only commlens's own files in it: the manifest and its lock, the rank event
and metadata files, the ranks' parts directories, the NIC counters and the
temporary files of these. Anything else in it is a foreign file: the
directory is left as it is and the error names that file. A sweep (see
:func:`commlens.sweep.catalog.clear_sweep`) uses the same rule for its own
files.

The nodes of one multi-node job share a run directory (:func:`join_run_dir`):
each takes a free slot of its job under a lock directory, so that no node's
start can remove another's files, and a run some node is still writing is
never replaced, not even with ``--force``.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from commlens.errors import UsageError
from commlens.safefile import META_LIMIT, read_json
from commlens.trace.jobid import JobIdentity
from commlens.trace.layout import (
    JOB_FILE,
    JOIN_LOCK,
    LIVE_LOCK,
    MANIFEST,
    OWN_DIRS,
    OWN_FILES,
    PART_FILES,
    manifest_probe,
    node_path,
)
from commlens.trace.live import LiveLock, describe, is_live
from commlens.trace.manifest import FORMAT_NAME, write_json_atomic
from commlens.trace.nodes import live_nodes, read_job, write_node

LOCK_STALE_S = 60.0
"""A join lock older than this was left by a process that died holding it."""
LOCK_WAIT_S = 180.0

Checker = Callable[[Path], Path | None]
"""Given an entry: None when it is commlens's own, else the foreign path (it or one inside)."""


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a ``run.json`` that says it is a commlens run."""
    try:
        data = read_json(path / MANIFEST, limit=META_LIMIT, follow=False)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT_NAME


def foreign_in_run(entry: Path) -> Path | None:
    """None when ``entry`` (in a run directory) is one of commlens's own files.

    An entry gone since it was listed is none of anyone's: a writer of the run renamed
    its temporary file into place (``.run.json.PID.tmp`` → ``run.json``) meanwhile.
    """
    try:
        mode = entry.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return entry
    if stat.S_ISDIR(mode):
        if not OWN_DIRS.match(entry.name):
            return entry
        try:
            inner = sorted(entry.iterdir())
        except FileNotFoundError:
            return None
        return next((f for f in inner if _foreign_part(f)), None)
    return None if stat.S_ISREG(mode) and OWN_FILES.match(entry.name) else entry


def _foreign_part(f: Path) -> bool:
    """Whether ``f``, in a rank's parts directory, is not a part file (gone: it is not)."""
    try:
        mode = f.lstat().st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) or not PART_FILES.match(f.name)


def first_foreign(path: Path, check: Checker) -> Path | None:
    """The first entry under ``path`` that ``check`` does not recognise."""
    try:
        for entry in _entries(path):
            if (bad := check(entry)) is not None:
                return bad
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return None


def _entries(path: Path) -> list[Path]:
    """The entries of ``path`` but the join and live locks, which are never a run's content."""
    return [e for e in sorted(path.iterdir()) if not _is_lock(e.name)]


def _drop_live_lock(path: Path) -> None:
    """Remove ``path``'s live lock file, when it is one (a regular file)."""
    lock = path / LIVE_LOCK
    try:
        if stat.S_ISREG(lock.lstat().st_mode):
            lock.unlink()
    except FileNotFoundError:
        pass


def _is_lock(name: str) -> bool:
    return name.startswith(JOIN_LOCK) or name == LIVE_LOCK


def remove_entries(path: Path, check: Checker) -> None:
    """Delete every entry of ``path``, after checking that all are commlens's own."""
    refuse_foreign_entries(path, check)
    try:
        for entry in _entries(path):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except OSError as exc:
        raise UsageError(f"{path}: cannot remove the old run ({exc.strerror or exc})") from None


def clear_run(path: Path, *, require_manifest: bool = True) -> None:
    """Empty the run directory ``path`` of commlens's files; refuse if it holds others.

    ``require_manifest=False`` is for a run directory inside commlens's own
    sweep directory, which an interrupted start may leave without ``run.json``.
    """
    if require_manifest and not is_run_dir(path):
        raise UsageError(
            f"{path} is not a commlens run (no valid {MANIFEST}); refusing to replace it"
        )
    remove_entries(path, foreign_in_run)


def _check_path(out: Path, flag: str) -> None:
    if out.is_symlink() and not out.is_dir():
        raise UsageError(f"{flag} {out} is a symlink to no directory; pick another directory")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {out} exists and is not a directory; pick a directory")


def _refuse_foreign(out: Path, flag: str, first: Path) -> None:
    if not is_run_dir(out) and read_job(out) is None:
        raise UsageError(
            f"{flag} {out} already exists and is not a commlens run (it holds "
            f"{first.name}); choose a new directory"
        )


def _refuse_live(out: Path, flag: str, live: LiveLock | None = None) -> None:
    """A one-line error unless ``live`` could be held alone (without it: unless no process
    holds ``out``'s live lock); no process writes ``out`` then."""
    if not (live.try_exclusive() if live is not None else not is_live(out)):
        raise UsageError(
            f"{flag} {out} holds a run that is still being written ({describe(out)}); "
            "refusing to touch it (pick another directory)"
        )


def _check_replaceable(out: Path, force: bool, flag: str, first: Path) -> None:
    """A one-line error unless ``out`` (holding ``first``) is a commlens run of commlens's
    own files and ``force`` is given; checked before anything is created in it."""
    _refuse_foreign(out, flag, first)
    if not force:
        raise UsageError(f"{flag} {out} already holds a run; pass --force to replace it")
    refuse_foreign_entries(out, foreign_in_run)


def refuse_foreign_entries(path: Path, check: Checker, doing: str = "replace") -> None:
    """A one-line error naming the first entry of ``path`` that ``check`` does not recognise."""
    bad = first_foreign(path, check)
    if bad is not None:
        raise UsageError(
            f"{path}: holds {str(bad.relative_to(path))!r}, which commlens did not write; "
            f"refusing to {doing} it (move it away or pick another directory)"
        )


def _replace_old(out: Path, force: bool, flag: str, first: Path, live: LiveLock) -> None:
    """Empty ``out``, which holds ``first``: only an old commlens run, only with ``force``,
    and only when no process writes it (``live`` then held alone)."""
    _refuse_foreign(out, flag, first)
    _refuse_live(out, flag, live)
    nodes = live_nodes(out)
    if nodes:
        job = read_job(out) or {}
        raise UsageError(
            f"{flag} {out} holds a run that is still being written (job {job.get('id', '?')!r}, "
            f"node on {nodes[0].get('host', '?')}); refusing to touch it (pick another directory)"
        )
    if not force:
        raise UsageError(f"{flag} {out} already holds a run; pass --force to replace it")
    clear_run(out, require_manifest=not (out / JOB_FILE).exists())


def _probe(out: Path, flag: str) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = manifest_probe(out, os.getpid())
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot write there ({exc.strerror or exc})") from None


def _live_lock(out: Path, flag: str, live: LiveLock | None = None) -> LiveLock:
    """``live`` (or ``out``'s live lock), its file open; a one-line error when it cannot be."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        return (live or LiveLock(out)).open()
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot write there ({exc.strerror or exc})") from None


def prepare_run_dir(out: Path, force: bool, flag: str = "--out") -> LiveLock:
    """Make ``out`` an empty directory for a new run; its live lock, held shared.

    An empty or missing directory is used as it is; a commlens run there is
    replaced with ``force`` (its own files only) unless a process or a node
    is still writing it; anything else is refused. Every refusal is a
    one-line :class:`UsageError`. Hold the returned lock (release it, or let
    the process end) for as long as the run is written.
    """
    _check_path(out, flag)
    first = first_foreign(out, lambda e: e) if out.is_dir() else None
    if first is not None:  # checked before anything is created in it
        _refuse_live(out, flag)
        _check_replaceable(out, force, flag, first)
    live = _live_lock(out, flag)
    try:
        _refuse_live(out, flag, live)  # held alone while this decides, even on an empty one
        if first is not None:
            with join_lock(out, flag):  # no node of a job joins while this decides
                if (first := first_foreign(out, lambda e: e)) is not None:
                    _replace_old(out, force, flag, first, live)
        _probe(out, flag)
        return live.share()
    except BaseException:
        live.release()
        raise


@contextmanager
def join_lock(out: Path, flag: str = "--out") -> Iterator[None]:
    """Hold ``out``'s join lock (a directory: its creation is atomic, on NFS too).

    A lock older than :data:`LOCK_STALE_S` is taken over; one held longer than
    :data:`LOCK_WAIT_S` by a live process is a one-line error.
    """
    lock = out / JOIN_LOCK
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            os.mkdir(lock)
            break
        except FileExistsError:
            _break_stale(lock)
        except OSError as exc:
            raise UsageError(f"{flag} {out}: cannot write there ({exc.strerror or exc})") from None
        if time.monotonic() > deadline:
            raise UsageError(
                f"{flag} {out}: {JOIN_LOCK} is held by another commlens trace for over "
                f"{LOCK_WAIT_S:.0f} s; remove it if no trace is starting there"
            )
        time.sleep(0.05)
    _bury_graves(out)
    try:
        yield
    finally:
        try:
            os.rmdir(lock)
        except OSError:
            pass


def _bury_graves(out: Path) -> None:
    """Remove the stale locks that a process renamed and then died (or failed) before
    removing (``.join.lock.stale.HOST.PID``); only empty directories, never a link."""
    try:
        graves = list(out.glob(f"{JOIN_LOCK}.stale.*"))
    except OSError:
        return
    for grave in graves:
        try:
            if stat.S_ISDIR(grave.lstat().st_mode):
                os.rmdir(grave)  # an empty directory only
        except OSError:
            pass


def _break_stale(lock: Path) -> None:
    """Remove ``lock`` when it is stale; a rename first, so only one process removes it."""
    try:
        if time.time() - lock.stat().st_mtime < LOCK_STALE_S:
            return
        grave = lock.with_name(f"{JOIN_LOCK}.stale.{socket.gethostname()}.{os.getpid()}")
        os.rename(lock, grave)
        os.rmdir(grave)
    except OSError:
        pass


def _free_slot(out: Path, job: JobIdentity) -> int | None:
    """This invocation's slot of ``job`` in ``out`` when it is free, else None."""
    wanted = [job.slot] if job.slot is not None else range(job.slots)
    return next((k for k in wanted if not node_path(out, k).exists()), None)


def join_run_dir(
    out: Path, job: JobIdentity, force: bool, node: dict[str, object], live: LiveLock | None = None
) -> int:
    """Take a slot of ``job`` in ``out``, creating the run when it is new; the slot.

    The decision and the claim (this node's ``node-NNNNN.json``, holding
    ``node`` with ``status: running``) happen under the join lock, so the
    nodes of one job, started in any order, share the directory. A run of
    another job, or with this slot taken, is replaced only with ``force`` and
    only when none of its nodes or processes is still running; a run of this
    job is joined only when it holds nothing commlens did not write; else
    refused in one line. ``live`` (this node's hold on the run's live lock,
    see :func:`prepare_run_dir`) is held shared on return; without it the
    lock is taken for the decision only.
    """
    _check_path(out, "--out")
    # Before anything is created in a foreign folder: refused here only for what commlens
    # did not write. A run that another node of the job is creating holds, until its
    # job.json is renamed into place, only that node's temporary files: decided under the
    # join lock, which that node holds while it writes them.
    first = first_foreign(out, foreign_in_run) if out.is_dir() else None
    if first is not None:
        _refuse_foreign(out, "--out", first)
    own = live is None
    live = _live_lock(out, "--out", live)
    try:
        with join_lock(out):
            slot = _join(out, job, force, node, live)
        live.share()
        return slot
    finally:
        if own:
            live.release()


def _join(out: Path, job: JobIdentity, force: bool, node: dict[str, object], live: LiveLock) -> int:
    """:func:`join_run_dir` under the join lock."""
    first = first_foreign(out, lambda e: e)
    slot = None
    if first is not None:
        theirs = read_job(out)
        if theirs is not None and theirs.get("id") == job.id:
            slot = _free_slot(out, job)
            if slot is not None:  # never write through what another planted there
                refuse_foreign_entries(out, foreign_in_run, "join")
        if slot is None:
            if theirs is not None and theirs.get("id") == job.id and live_nodes(out):
                taken = "all its slots are" if job.slot is None else f"slot {job.slot} is"
                raise UsageError(
                    f"--out {out} holds a running run of this job ({job.id}) and "
                    f"{taken} taken; refusing to touch it"
                )
            _replace_old(out, force, "--out", first, live)
    if slot is None:
        _probe(out, "--out")
        write_json_atomic(out / JOB_FILE, job.record())
        slot = job.slot if job.slot is not None else 0
    write_node(node_path(out, slot), {**node, "slot": slot, "status": "running"})
    return slot


def remove_run_dir(
    path: Path, flag: str, *, require_manifest: bool = True, only_runs: bool = False
) -> None:
    """Remove the directory ``path``: commlens's own files (see :func:`clear_run`; with
    ``only_runs``, only when it is a commlens run, else it must be empty), its live lock,
    then it. Refused in one line while a process still writes it."""
    _refuse_live(path, flag)
    if not only_runs or is_run_dir(path):
        clear_run(path, require_manifest=require_manifest)
    _drop_live_lock(path)  # no process holds it (checked), and the run is gone
    path.rmdir()


def build_beside(out: Path, build: Callable[[Path], None], what: str, tag: str) -> None:
    """Build a run with ``build(tmp)`` in a temporary directory beside ``out``, then
    rename it onto ``out`` (absent, empty, or an old commlens run, cleared first):
    ``out`` holds the whole run or what it held before. ``what`` names the run in
    the one-line error; ``tag`` the temporary directory."""
    tmp = out.parent / f".{out.name}.{tag}-{os.getpid()}.tmp"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        build(tmp)
        if out.is_dir():
            remove_run_dir(out, "output", require_manifest=False, only_runs=True)
        os.rename(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"{out}: cannot write {what} ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
