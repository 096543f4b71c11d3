"""Whether a run directory is still being written: a lock its writers hold.

``commlens trace`` and ``commlens run`` from the moment they claim a run
directory, and every rank's event writer while it is open, hold a shared
``flock`` on the run's ``.run.live``. The kernel drops a lock when its
process ends, however it ends, so the mark of a job that died never blocks
anyone, and no heartbeat or age is needed. Replacing or joining a run takes
the lock exclusively without waiting (:meth:`LiveLock.try_exclusive`): a run
that any process still writes, on this host or (through the file system's
lock manager) another, is never replaced.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from commlens.safefile import open_lock
from commlens.trace.layout import LIVE_LOCK


class LiveLock:
    """``.run.live`` of one run directory, held shared, exclusive or not at all.

    The file is created (never through a symlink: see
    :func:`commlens.safefile.open_lock`) when first held, and stays.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LIVE_LOCK
        self._fd: int | None = None

    def open(self) -> LiveLock:
        """Open (create) the lock file; an OSError when it cannot be."""
        self._descriptor()
        return self

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = open_lock(self.path)
        return self._fd

    def share(self) -> LiveLock:
        """Hold the lock shared (waits while a replacement holds it exclusively)."""
        fcntl.flock(self._descriptor(), fcntl.LOCK_SH)
        return self

    def try_exclusive(self) -> bool:
        """Hold the lock alone, at once; False (holding it shared, if at all, as before)
        when another process holds it."""
        try:
            fcntl.flock(self._descriptor(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the lock
            self._fd = None

    def __enter__(self) -> LiveLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def is_live(run_dir: Path) -> bool:
    """Whether some process holds ``run_dir``'s live lock (False when it has none)."""
    path = Path(run_dir) / LIVE_LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def holders(run_dir: Path) -> list[int]:
    """Pids on this host holding ``run_dir``'s live lock (from ``/proc/locks``; [] elsewhere)."""
    try:
        st = os.stat(Path(run_dir) / LIVE_LOCK, follow_symlinks=False)
        with open("/proc/locks") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4].isdecimal():
            if fields[5].rsplit(":", 1)[-1] == str(st.st_ino):
                pids.append(int(fields[4]))
    return sorted(set(pids))


def describe(run_dir: Path) -> str:
    """Who writes ``run_dir``, for an error: the pids on this host, when known."""
    pids = holders(run_dir)
    shown = ", ".join(map(str, pids[:4])) + (" ..." if len(pids) > 4 else "")
    return f"pid {shown} holds {LIVE_LOCK}" if pids else f"a process holds {LIVE_LOCK}"
