"""Records of emulated runs: who owns each one and exactly what it created.

One JSON file per run, ``<state dir>/<run id>.json``::

    {"run_id": "3fa2c1", "owner_pid": 4242, "owner_start": 123456,
     "lineage": [[4242, 123456], [4200, 123400], [1, 2]],
     "namespaces": ["commlens-3fa2c1-n0"], "bridges": ["cl3fa2c1br"],
     "veths": ["cl3fa2c1h0"]}

The cluster claims its run id by creating the file (exclusively, so two runs
never share an id) and adds each object's name *before* creating the object,
so a crash halfway through setup still leaves a record of everything that may
exist. ``veths`` holds the host-side end; its peer goes with it. ``commlens net
cleanup`` removes only objects named in records, and skips runs whose owner
(pid and start time, so a reused pid does not count) is still alive, so it
never pulls the network from under a run in progress nor touches an interface
commlens did not make. ``lineage`` is the owner and its ancestors (pid, start
time) when the run was claimed: which process tree made the run, still known
after the owner is gone (:meth:`RunRecord.made_by`).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from commlens.safefile import SMALL_LIMIT, read_json, read_text

KINDS = ("namespaces", "bridges", "veths")
"""The kinds of object a record lists, in the order teardown removes them last to first."""


def state_dir() -> Path:
    """``/run/commlens/netem`` when writable (root), else a folder in the temp dir."""
    for base in (Path("/run/commlens/netem"), Path(tempfile.gettempdir()) / "commlens-netem"):
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(base, os.W_OK):
            return base
    raise OSError("no writable state directory for emulated runs")


def record_path(run_id: str) -> Path:
    return state_dir() / f"{run_id}.json"


@dataclass
class RunRecord:
    """What one emulated run owns: its owner process and the objects it made."""

    run_id: str
    owner_pid: int
    owner_start: int | None = None
    lineage: list[tuple[int, int | None]] = field(default_factory=list)
    """The owner and its ancestors, nearest first, as (pid, start time), when claimed."""
    namespaces: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)

    def objects(self) -> list[tuple[str, str]]:
        """(kind, name) of every recorded object, in creation order per kind."""
        return [(kind, name) for kind in KINDS for name in getattr(self, kind)]

    def add(self, kind: str, name: str) -> None:
        """Note ``name`` (of ``kind``) and write the record; call before creating it."""
        names: list[str] = getattr(self, kind)
        if name not in names:
            names.append(name)
            self.save()

    def discard(self, kind: str, name: str) -> None:
        """Drop ``name`` from the record once the object is gone."""
        names: list[str] = getattr(self, kind)
        if name in names:
            names.remove(name)
            self.save()

    def owner_alive(self) -> bool:
        return _alive(self.owner_pid, self.owner_start)

    def made_by(self, pid: int) -> bool:
        """Whether process ``pid`` (alive now) or one of its descendants made the run, the
        maker gone or not: ``pid`` with its start time is in the run's lineage."""
        start = _start_time(pid)
        return start is not None and (pid, start) in {(p, s) for p, s in self.lineage}

    def save(self) -> None:
        """Write the record atomically (a reader never sees half a file)."""
        path = record_path(self.run_id)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self)) + "\n")
        os.replace(tmp, path)


def claim_run(run_id: str, pid: int) -> RunRecord:
    """A new, empty record for ``run_id`` owned by ``pid``.

    Raises :class:`FileExistsError` when another run already holds the id.
    """
    record = RunRecord(run_id, pid, _start_time(pid), _lineage(pid))
    fd = os.open(record_path(run_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(asdict(record)) + "\n")
    return record


def record_owner(run_id: str, pid: int) -> RunRecord:
    """Write (or replace) the record of ``run_id`` with owner ``pid`` and no objects."""
    record = RunRecord(run_id, pid, _start_time(pid), _lineage(pid))
    record.save()
    return record


def load_record(run_id: str) -> RunRecord | None:
    """The record of ``run_id``, or None when there is none (or it is unreadable)."""
    return _read(record_path(run_id))


def list_records() -> list[RunRecord]:
    """Every readable run record, by run id."""
    records = [_read(path) for path in sorted(state_dir().glob("*.json"))]
    return [r for r in records if r is not None]


def unreadable_records() -> list[Path]:
    """Record files that cannot be read as a record (corrupt, or not commlens's)."""
    return [path for path in sorted(state_dir().glob("*.json")) if _read(path) is None]


def forget_owner(run_id: str) -> None:
    """Delete the record of ``run_id`` (and one in the older ``.pid`` form)."""
    record_path(run_id).unlink(missing_ok=True)
    (state_dir() / f"{run_id}.pid").unlink(missing_ok=True)


def stale_pid_files() -> list[Path]:
    """Owner files in the older ``<id>.pid`` form (no object list) whose owner is gone."""
    stale = []
    for path in state_dir().glob("*.pid"):
        try:
            pid = int(read_text(path, limit=SMALL_LIMIT, follow=False).strip())
        except (OSError, ValueError):
            pid = 0
        if pid <= 0 or not _alive(pid, None):
            stale.append(path)
    return stale


def owner_pid(run_id: str) -> int | None:
    """Pid of the run's owner while it is alive, else None."""
    record = load_record(run_id)
    if record is not None:
        return record.owner_pid if record.owner_alive() else None
    try:  # a record in the older form
        pid = int(read_text(state_dir() / f"{run_id}.pid", limit=SMALL_LIMIT, follow=False))
    except (OSError, ValueError):
        return None
    return pid if _alive(pid, None) else None


def owner_alive(run_id: str) -> bool:
    """True when the run's owner process is still running."""
    return owner_pid(run_id) is not None


def _read(path: Path) -> RunRecord | None:
    try:
        data: Any = read_json(path, limit=SMALL_LIMIT, follow=False)
        record = RunRecord(
            run_id=str(data["run_id"]),
            owner_pid=int(data["owner_pid"]),
            owner_start=None if data.get("owner_start") is None else int(data["owner_start"]),
            lineage=[(int(p), None if s is None else int(s)) for p, s in data.get("lineage", [])],
            **{kind: [str(name) for name in data.get(kind, [])] for kind in KINDS},
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return record if path.stem == record.run_id else None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _lineage(pid: int) -> list[tuple[int, int | None]]:
    """``pid`` and its ancestors up to init, nearest first, as (pid, start time)."""
    chain: list[tuple[int, int | None]] = []
    while pid > 0 and len(chain) < 4096:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            break
        chain.append((pid, int(fields[19])))
        pid = int(fields[1])
    return chain


def _alive(pid: int, start: int | None) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return True
    if fields[0] == "Z":  # a zombie is dead for our purposes
        return False
    # The pid was reused by another process: the owner is gone.
    return start is None or fields[19] == str(start)
