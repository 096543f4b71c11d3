"""A rank's own file in the run, ``rank-NNNNN.json``: written whole at open and
close, and rewritten by the writer thread's checkpoint when it changed.

Past :data:`META_SPACED_FROM` step windows the checkpoint's rewrites use at
most :data:`META_SHARE` of the CPU time (encoding 100,000 steps holds the GIL
for a while). Waiting on the disk is not counted: a slow fsync holds nothing
the job needs. A smaller rank json (about 100 kB) is rewritten whenever it
changed: one garbage collection inside a write would space it seconds apart.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from commlens.trace.layout import rank_meta_path
from commlens.trace.manifest import FORMAT_NAME, write_json_atomic

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder

META_SHARE = 0.01
META_SPACED_FROM = 1000


class RankFile:
    """Writes a recorder's ``rank-NNNNN.json``, one write at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: tuple[Any, ...] | None = None  # what the last write held
        self.due = 0.0  # monotonic time before which no rewrite is made

    def write(self, rec: Recorder, status: str) -> None:
        """Write the rank json whole (temporary file, fsync, rename)."""
        assert rec.rank is not None
        if not self.lock.acquire(timeout=5.0):  # a signal handler never hangs here
            raise TimeoutError(f"rank {rec.rank}: rank metadata still being written")
        try:
            # Copies taken under the lock: another thread may add steps or meta
            # meanwhile, and a rewrite never replaces a newer one with older copies.
            steps, meta, clock_info = list(rec.steps.steps), dict(rec.meta), rec.clock_info
            data = {
                "format": FORMAT_NAME + "-rank",
                "rank": rec.rank,
                "world_size": rec.world_size,
                "backend": rec.backend,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "status": status,
                "events": rec.writer.n_events if rec.writer else 0,
                "t_start_ns": rec.t_start_ns,
                "t_end_ns": rec.clock(),
                "steps": steps,
                "clock": clock_info,
                "recording_error": rec.error,
                "meta": meta,
            }
            write_json_atomic(rank_meta_path(rec.run_dir, rec.rank), data, indent=None)
            self.seen = (len(steps), clock_info, meta, data["events"])
        finally:
            self.lock.release()

    def rewrite_if_changed(self, rec: Recorder) -> None:
        """Rewrite as ``running`` if the steps, clock, meta or events changed (spaced as
        the module says); raises what the write raised."""
        seen = self.seen
        now = time.monotonic()
        if now < self.due or (
            seen is not None
            and seen[0] == len(rec.steps.steps)
            and seen[1] is rec.clock_info
            and seen[2] == rec.meta
            and seen[3] == (rec.writer.n_events if rec.writer else 0)
        ):
            return
        cpu = time.thread_time()
        try:
            self.write(rec, "running")
        finally:
            if len(rec.steps.steps) >= META_SPACED_FROM:
                self.due = now + (time.thread_time() - cpu) / META_SHARE
