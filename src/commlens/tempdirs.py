"""commlens's temporary folders, reclaimed at the next start when their process died.

A folder is named ``commlens-KIND-PID-RANDOM`` in the system's temporary
folder. A process killed outright (SIGKILL, the OOM killer) cannot remove its
own; the next command that makes one of the same kind removes those whose
process no longer runs (only directories, only the current user's, never
through a link).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def reclaim(kind: str, base: str | None = None) -> list[Path]:
    """Remove the ``kind`` folders in ``base`` (the temporary folder) of dead processes."""
    removed: list[Path] = []
    root = Path(base or tempfile.gettempdir())
    try:
        entries = list(root.glob(f"commlens-{kind}-*-*"))
    except OSError:
        return removed
    for entry in entries:
        pid_text = entry.name[len(f"commlens-{kind}-") :].split("-", 1)[0]
        if not (pid_text.isascii() and pid_text.isdigit()) or _alive(int(pid_text)):
            continue
        try:
            info = entry.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            shutil.rmtree(entry)
            removed.append(entry)
        except OSError:
            pass
    return removed


def make_temp_dir(kind: str) -> Path:
    """A new temporary folder of ``kind`` (after reclaiming the dead's); remove it when done."""
    reclaim(kind)
    return Path(tempfile.mkdtemp(prefix=f"commlens-{kind}-{os.getpid()}-"))


@contextmanager
def temp_dir(kind: str) -> Iterator[Path]:
    """:func:`make_temp_dir`, removed when the block ends."""
    path = make_temp_dir(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
