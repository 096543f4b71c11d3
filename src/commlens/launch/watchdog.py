"""The hang watchdog: watches a job's ranks from the launcher's side.

A rank that holds the interpreter lock, or is stuck in C, cannot report its
own hang; its capture's writer thread still rewrites ``inflight-NNNNN.json``
(ops in flight and the count of events) at each checkpoint. The watchdog
reads those files every ``poll_s``: when no rank's count of events moved for
``timeout_s`` while some op is in flight, it asks every rank of this host
for its Python stacks (the capture's faulthandler signal), notes the hang in
the manifest, hands the run to ``on_hang`` (which prints the diagnosis) and,
with ``kill``, kills the ranks; otherwise it waits for the job to move again
before it can fire again. It costs the ranks nothing on their per-op path.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from commlens.trace.files import format_ranks
from commlens.trace.inflight import STACK_SIGNAL, read_inflight, read_json_object
from commlens.trace.layout import INFLIGHT_FILE, rank_meta_path, stacks_path

STACKS_WAIT_S = 2.0
"""How long the watchdog waits for the ranks to write their stacks."""


def _ours(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` is a live rank of this run: its environment (``commlens trace``) or
    its command line (``commlens run``'s workers) names the run directory."""
    where = str(run_dir.resolve()).encode()
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"COMMLENS_TRACE_DIR=" + where in env or any(
        a == where or a == str(run_dir).encode() for a in argv
    )


class HangWatchdog:
    """A thread that watches the run in ``run_dir`` while its job runs."""

    def __init__(
        self,
        run_dir: Path,
        timeout_s: float,
        on_hang: Callable[[Path], None],
        *,
        kill: bool = False,
        poll_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self.on_hang = on_hang
        self.kill = kill
        self.poll_s = poll_s
        self.clock = clock
        self.fired = 0
        self.killed: list[int] = []  # the ranks it killed (kill), and after how long
        self.killed_after_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="commlens-hang-watchdog", daemon=True
        )

    def __enter__(self) -> HangWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def state(self) -> tuple[tuple[tuple[int, int], ...], bool]:
        """((rank, events) of every rank, whether any op is in flight) from the files."""
        progress = []
        flying = False
        try:
            names = sorted(p.name for p in self.run_dir.iterdir())
        except OSError:
            return (), False
        for name in names:
            match = INFLIGHT_FILE.match(name)
            if not match:
                continue
            rank = int(match.group(1))
            data = read_inflight(self.run_dir, rank)
            if data is None:
                continue
            progress.append((rank, data.events))
            flying = flying or bool(data.ops)
        return tuple(progress), flying

    def _run(self) -> None:
        last, since, armed = None, self.clock(), True
        while not self._stop.wait(self.poll_s):
            progress, flying = self.state()
            now = self.clock()
            if progress != last:
                last, since, armed = progress, now, True
                continue
            if armed and flying and now - since >= self.timeout_s:
                armed = False
                self._fire(now - since)

    def _pids(self) -> dict[int, int]:
        """Rank -> pid of every live rank of this run on this host."""
        host = socket.gethostname()
        out = {}
        for name in sorted(p.name for p in self.run_dir.iterdir()):
            match = INFLIGHT_FILE.match(name)
            if not match:
                continue
            rank = int(match.group(1))
            meta = read_json_object(rank_meta_path(self.run_dir, rank)) or {}
            pid = meta.get("pid")
            if isinstance(pid, int) and meta.get("host") == host and _ours(pid, self.run_dir):
                out[rank] = pid
        return out

    def _fire(self, stalled_s: float) -> None:
        from commlens.trace.manifest import merge_manifest

        self.fired += 1
        pids = self._pids()
        for pid in pids.values():
            try:
                os.kill(pid, STACK_SIGNAL)
            except OSError:
                pass
        deadline = self.clock() + STACKS_WAIT_S
        while self.clock() < deadline and not all(
            _size(stacks_path(self.run_dir, r)) for r in pids
        ):
            time.sleep(0.05)
        time.sleep(0.2)  # the last lines of a dump being written
        note = {"detected_unix_s": time.time(), "timeout_s": self.timeout_s,
                "stalled_s": round(stalled_s, 3), "killed": self.kill,
                "killed_ranks": sorted(pids) if self.kill else []}  # fmt: skip
        try:
            merge_manifest(self.run_dir, {"hang": note})
        except Exception:
            pass
        try:
            self.on_hang(self.run_dir)
        finally:
            if self.kill:
                self.killed, self.killed_after_s = sorted(pids), stalled_s
                for pid in pids.values():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass


def kill_status(dog: HangWatchdog | None) -> str | None:
    """What ended a job whose ranks ``dog`` killed (for the launcher's last line), or None."""
    if dog is None or not dog.killed:
        return None
    return (
        f"killed by the hang watchdog (--kill-on-hang): no op finished for "
        f"{dog.killed_after_s:.0f} s while ops were in flight; ranks {format_ranks(dog.killed)}"
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
