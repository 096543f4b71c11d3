"""Who owns a live emulated run: ``<state dir>/<run id>.pid`` holds the owner's pid.

``commlens net cleanup`` skips runs whose owner is still alive, so cleaning
leftovers never pulls the network from under a run in progress.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def record_owner(run_id: str, pid: int) -> None:
    (state_dir() / f"{run_id}.pid").write_text(f"{pid}\n")


def forget_owner(run_id: str) -> None:
    (state_dir() / f"{run_id}.pid").unlink(missing_ok=True)


def owner_pid(run_id: str) -> int | None:
    """Pid of the run's owner while it is alive, else None."""
    try:
        pid = int((state_dir() / f"{run_id}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def owner_alive(run_id: str) -> bool:
    """True when the run's owner process is still running."""
    return owner_pid(run_id) is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True
