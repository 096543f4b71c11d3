"""Signals between a launcher and the processes it starts.

Three guarantees every commlens launcher gives its children:

- they die with the launcher: each child asks the kernel (``prctl
  PR_SET_PDEATHSIG``) for a signal when its parent goes, even by SIGKILL;
- they run in their own session, so a terminal's Ctrl-C reaches the launcher
  alone, which stops them in order and reports once;
- SIGINT and SIGTERM of the launcher are recorded, not raised, so the
  launcher can stop its children, wait for them and still write its results.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_prctl: Any = None


def _load_prctl() -> Any:
    """libc's ``prctl``, looked up once in the parent (never after a fork)."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when its parent dies.

    The kernel sends it when the *thread* that forked the child ends, not the
    process: start and wait for children from one long-lived thread (the
    launchers here do). The setting survives ``execve`` (``ip netns exec``
    execs the command in place, so a rank in a namespace keeps it) but not a
    set-user-ID program, nor ``fork``: grandchildren need their own. A parent
    that died before the call is caught by comparing ``getppid``.
    """
    prctl = _load_prctl()
    parent = os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the launcher was gone before prctl: go too
            os.kill(os.getpid(), sig)

    return preexec


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; the number for one Python does not know."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def shell_code(returncode: int) -> int:
    """A ``Popen`` return code as a shell reports it: 128 + N when killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    """``"was killed by SIGKILL"`` or ``"exited with code 3"``."""
    if returncode < 0:
        return f"was killed by {signal_name(-returncode)}"
    return f"exited with code {returncode}"


class StopRequests:
    """SIGINT/SIGTERM received while installed: how many and which came first.

    Handlers only record (they run between bytecodes of the main thread), and
    the launcher's loop acts. Outside the main thread nothing is installed and
    signals keep their usual effect.
    """

    def __init__(self) -> None:
        self.count = 0
        self.first: int | None = None
        self.last: int | None = None

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        self.count += 1
        self.last = signum
        if self.first is None:
            self.first = signum

    @contextmanager
    def installed(self) -> Iterator[StopRequests]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._record)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc"):
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of group ``pgid``; a gone group is no error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
