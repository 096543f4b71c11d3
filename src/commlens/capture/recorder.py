"""The per-process recorder: turns intercepted calls into rows of events.

It owns the rank's writer (opened once the process group exists), the
sequence counter, async ops waiting for completion and the fail-safe: the
first error inside recording is reported once on stderr and recording stops,
while every collective keeps running with the caller's arguments.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from commlens.capture.context import StepTracker, current_phase_and_module
from commlens.capture.groups import GroupRegistry
from commlens.capture.ops import Call, dtype_name
from commlens.capture.threads import keep_thread_state
from commlens.capture.timing import CudaTimer
from commlens.trace.manifest import FORMAT_NAME, merge_manifest, rank_meta_path, write_json_atomic
from commlens.trace.packed import NO_PEER, PACKED_EVENT
from commlens.trace.writer import EventWriter

Work = torch._C._distributed_c10d.Work
_pack = PACKED_EVENT.pack
# Completed ops are written in batches of this many (and at each step, wait
# and close): the code that writes them then runs warm, once per batch.
COLLECT_AT = 64


@dataclass(slots=True)
class Pending:
    """An async op issued but not yet complete (or still being waited on)."""

    head: tuple[Any, ...] | None  # site .. is_async: the packed fields before the times
    step: int
    t_issue: int
    # Or, for an op read later (Recorder.on_deferred): (make_call, hint, phase, module, seq).
    later: tuple[Any, ...] | None = None
    t_end: int | None = None
    wait_ns: int = 0
    waiting: bool = False
    done: bool = False
    key: int = 0  # id() of its Work in Recorder._pending


class Recorder:
    """Records the events of one process into one run directory."""

    def __init__(
        self,
        run_dir: Path,
        *,
        meta: dict[str, Any] | None = None,
        flush_events: int = 16384,
        flush_seconds: float = 2.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.meta: dict[str, Any] = dict(meta or {})
        self.flush_events = flush_events
        self.flush_seconds = flush_seconds
        self.clock = clock
        self.groups = GroupRegistry()
        self.steps = StepTracker(clock)
        self.cuda = CudaTimer()
        # CUDA events only where CUDA tensors can exist: saves a check per call.
        self.gpu = torch.cuda.is_available()
        # Autograd dispatch keys to exclude around intercepted calls while the
        # C++-call kernel is registered (capture.cpp); None otherwise.
        self.below_autograd: Any = None
        self.writer: EventWriter | None = None
        self.rank: int | None = None
        self.world_size: int | None = None
        self.backend = ""
        self._seq = itertools.count()  # next() is atomic: threads never share a seq
        self.disabled = False
        self.error = ""
        self.clock_info: dict[str, Any] = {}
        self.pid = os.getpid()
        self.t_start_ns = clock()
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[Any, Pending]] = {}
        # (pending, t_end) of completed ops, stamped by the backend's thread.
        self._done: deque[tuple[Pending, int]] = deque()
        # id() of the pending op of each completion callback not yet run.
        self._armed: set[int] = set()
        self._sites: dict[tuple[Any, ...], int] = {}
        self.groups.on_change = self._sites_changed
        self.steps.on_advance = self._collect

    def forked(self) -> None:
        """A forked child records on its own, under its own rank, once it has one."""
        self.writer = None
        self.rank = None
        self._seq = itertools.count()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._pending = {}
        self._done = deque()
        self._armed = set()
        self._sites = {}

    # -- lifecycle ---------------------------------------------------------
    def ensure_open(self) -> EventWriter | None:
        """Open this rank's writer once the default process group exists."""
        if self.writer is not None or self.disabled:
            return self.writer
        if not dist.is_available() or not dist.is_initialized():
            return None
        try:
            self.rank = dist.get_rank()
            self.world_size = dist.get_world_size()
            self.backend = str(dist.get_backend())
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.writer = EventWriter(
                self.run_dir,
                self.rank,
                flush_events=self.flush_events,
                flush_seconds=self.flush_seconds,
                on_error=self.fail,
            )
            self.write_meta("running")
        except Exception as exc:
            self.fail(exc)
        return self.writer

    def fail(self, exc: BaseException) -> None:
        """Stop recording after the first error; say so once."""
        if self.disabled:
            return
        self.disabled = True
        self.error = f"{type(exc).__name__}: {exc}"
        where = f"rank {self.rank}" if self.rank is not None else f"pid {os.getpid()}"
        # One write, so lines of several ranks sharing a terminal never interleave.
        sys.stderr.write(
            f"commlens: warning: recording stopped on {where} ({self.error}); "
            "training continues untraced\n"
        )
        sys.stderr.flush()

    def close(self) -> None:
        """Flush everything, finish the rank file and the manifest."""
        self._settle()
        self._collect()
        for work, pending in list(self._pending.values()):
            if work is not None and pending.t_end is None:
                try:
                    if work.is_completed():
                        pending.t_end = self.clock()
                except Exception:
                    pass
            try:
                self._emit(pending, force=True)
            except Exception as exc:
                self.fail(exc)
        self._pending.clear()
        if self.writer is None:
            return
        try:
            self.cuda.drain(self._append)
            self.writer.close()
        except Exception as exc:
            self.fail(exc)
        try:
            self.write_meta("ok" if not self.error else "recording-failed")
            merge_manifest(self.run_dir)
        except Exception as exc:
            self.fail(exc)

    def close_on_signal(self, status: str) -> None:
        """Best-effort finish when the process is being terminated.

        Never blocks for long: if the interrupted thread holds the writer, or
        its last part does not finish in time, the parts already on disk are
        what survives.
        """
        writer = self.writer
        if writer is None or self.disabled:
            return
        if not writer._lock.acquire(blocking=False):
            return
        writer._lock.release()
        # Completed ops not yet written, unless the interrupted thread is writing them.
        if self._lock.acquire(blocking=False):
            self._lock.release()
            try:
                self._collect()
            except Exception:
                pass
        try:
            writer.close(timeout=5.0)
            self.write_meta(status)
            merge_manifest(self.run_dir)
        except Exception:
            pass

    def write_meta(self, status: str) -> None:
        assert self.rank is not None
        write_json_atomic(
            rank_meta_path(self.run_dir, self.rank),
            {
                "format": FORMAT_NAME + "-rank",
                "rank": self.rank,
                "world_size": self.world_size,
                "backend": self.backend,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "status": status,
                "events": self.writer.n_events if self.writer else 0,
                "t_start_ns": self.t_start_ns,
                "t_end_ns": self.clock(),
                "steps": self.steps.steps,
                "clock": self.clock_info,
                "recording_error": self.error,
                "meta": self.meta,
            },
        )

    # -- recording ---------------------------------------------------------
    def on_call(
        self,
        call: Call,
        t_issue: int,
        t_return: int,
        result: Any,
        frame: FrameType | None,
        hint: tuple[str, str],
        phase_hint: str,
        gpu_token: Any = None,
        *,
        defer: bool = False,
    ) -> tuple[Any, ...] | None:
        """Record one call; ``hint`` is (api, role) from the capture path.

        The hot path of the capture, kept in one frame. With ``defer`` the
        event is not written: its head (the packed fields before the times)
        is returned for the caller to finish once the op completes.
        """
        writer = self.writer
        if writer is None:
            writer = self.ensure_open()
            if writer is None:
                return None
        if len(self._done) >= COLLECT_AT:
            self._collect()
        op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = call
        # The group object itself keys the site; the registry keeps it alive.
        phase, module = current_phase_and_module(self.steps, frame, phase_hint)
        key = (op, hint, group, dtype, phase, module)
        site = self._sites.get(key)
        if site is None:
            site = self._new_site(key)
        seq = next(self._seq)
        if peer is None:
            peer = NO_PEER
        if result is None and gpu_token is None and not defer:  # a blocking CPU op
            # EventWriter.append_packed, inlined: one deque append, lock-free.
            queue = writer.queue
            queue.append(_pack(site, seq, count, bytes_in, bytes_out, size, peer, is_async,
                               t_issue, t_return, t_return - t_issue, self.steps.step))  # fmt: skip
            if len(queue) >= writer.next_kick:
                writer.kick()
            return None
        head = (site, seq, count, bytes_in, bytes_out, size, peer, is_async)
        if defer:
            return head
        if gpu_token is not None:  # CUDA events time it on the device
            work = result if isinstance(result, Work) else None
            self.cuda.finish(gpu_token, self._append, head, self.steps.step, t_issue, work)
        elif isinstance(result, Work):
            self._track(result, Pending(head, self.steps.step, t_issue))
        else:
            self._append(head, self.steps.step, t_issue, t_return, t_return - t_issue)
        return None

    def on_deferred(
        self,
        make_call: Callable[[], Call],
        t_issue: int,
        work: Any,
        frame: FrameType | None,
        hint: tuple[str, str],
        phase_hint: str,
    ) -> None:
        """Record an async op whose arguments are read only when it is written.

        For ops issued between a backward pass's computations (DDP's
        buckets): there the recorder's code runs with cold caches, so it does
        only what cannot wait (where the op was issued, its sequence number,
        its completion callback) and reads the arguments (``make_call``, which
        may hold them until then) with the completed ops of a batch.
        """
        if self.writer is None and self.ensure_open() is None:
            return
        phase, module = current_phase_and_module(self.steps, frame, phase_hint)
        later = (make_call, hint, phase, module, next(self._seq))
        self._track(work, Pending(None, self.steps.step, t_issue, later=later))
        if len(self._done) >= COLLECT_AT:
            self._collect()

    def resolve_deferred(self) -> None:
        """Read the calls of ops recorded by :meth:`on_deferred` now.

        Called before a process group is destroyed: afterwards its ranks can
        no longer be looked up. Never raises.
        """
        try:
            self._collect()
            for _, pending in list(self._pending.values()):
                later = pending.later
                if later is not None and pending.head is None:
                    pending.head = self._head(later)
                    pending.later = None
        except Exception as exc:
            self.fail(exc)

    def _head(self, later: tuple[Any, ...]) -> tuple[Any, ...]:
        """The packed fields before the times of an op recorded by :meth:`on_deferred`."""
        make_call, hint, phase, module, seq = later
        op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = make_call()
        key = (op, hint, group, dtype, phase, module)
        site = self._sites.get(key)
        if site is None:
            site = self._new_site(key)
        return (site, seq, count, bytes_in, bytes_out, size, NO_PEER if peer is None else peer,
                is_async)  # fmt: skip

    def _new_site(self, key: tuple[Any, ...]) -> int:
        op, (api, role_hint), group, dtype, phase, module = key
        info = self.groups.info(group)
        assert self.writer is not None
        site = self.writer.site(
            (op, api, info.name, info.ranks, info.size, info.role or role_hint,
             dtype_name(dtype), phase, module)
        )  # fmt: skip
        self._sites[key] = site
        return site

    def _sites_changed(self) -> None:
        """Group names or roles changed: sites are looked up afresh."""
        self._sites.clear()

    def _append(self, head: tuple[Any, ...], step: int, t0: int, t1: int, wait: int) -> None:
        assert self.writer is not None
        self.writer.append_packed(_pack(*head, t0, t1, wait, step))

    def _track(self, work: Any, pending: Pending) -> None:
        """Time ``work`` to completion.

        The completion callback runs on the backend's own thread (gloo's
        worker, which the op's waiter and the backend's next op wait on), so
        it does the least it can: it stamps the time and queues the op, on a
        thread state it keeps (:mod:`commlens.capture.threads`). The event is
        written from the recording threads, by :meth:`_collect`.
        """
        pending.key = key = id(work)
        self._pending[key] = (work, pending)  # one store: atomic, no lock needed
        done, clock, armed = self._done.append, self.clock, self._armed
        token = id(pending)  # the callback holds pending: no other takes its id meanwhile

        def completed(_future: Any) -> None:
            done((pending, clock()))
            keep_thread_state()
            armed.discard(token)

        armed.add(token)
        try:
            work.get_future().add_done_callback(completed)
        except Exception:
            armed.discard(token)  # completion is then seen by wait() or at close

    def _settle(self, timeout: float = 5.0) -> None:
        """Give ops still in flight (at most ``timeout`` seconds) to complete.

        Their completion callbacks must run while the interpreter is whole:
        one that fires on the backend's thread during interpreter shutdown
        aborts the process, which untraced would have exited normally.
        """
        deadline = time.monotonic() + timeout
        while self._armed and time.monotonic() < deadline:
            time.sleep(0.001)

    def _collect(self) -> None:
        """Write the ops whose completion was stamped (and nobody waits on)."""
        done = self._done
        while done:
            try:
                pending, t_end = done.popleft()
            except IndexError:
                return  # another thread took the last one
            with self._lock:
                if pending.t_end is None:
                    pending.t_end = t_end
                if pending.waiting or pending.done:
                    continue
                entry = self._pending.get(pending.key)
                if entry is not None and entry[1] is pending:
                    del self._pending[pending.key]
            self._safe_emit(pending)

    def before_wait(self, work: Any) -> Pending | None:
        if not self._pending:  # blocking ops wait internally: keep that path cheap
            return None
        with self._lock:
            entry = self._pending.get(id(work))
            if entry is None or entry[0] is not work:
                return None
            entry[1].waiting = True
            return entry[1]

    def after_wait(self, work: Any, pending: Pending, t0: int, t1: int) -> None:
        self._collect()  # the op's own stamp, if its callback ran already
        with self._lock:
            pending.waiting = False
            pending.wait_ns += t1 - t0
            if pending.t_end is None:
                pending.t_end = t1
            self._pending.pop(id(work), None)
        self._safe_emit(pending)

    def _safe_emit(self, pending: Pending) -> None:
        try:
            self._emit(pending)
        except Exception as exc:
            self.fail(exc)

    def _emit(self, pending: Pending, force: bool = False) -> None:
        if pending.done or self.writer is None or (self.disabled and not force):
            return
        pending.done = True
        later = pending.later  # read first: resolve_deferred sets head, then clears later
        head = pending.head if later is None else self._head(later)
        pending.later = None  # lets go of the op's arguments
        assert head is not None  # an op has one or the other
        t_end = pending.t_end if pending.t_end is not None else pending.t_issue
        self._append(head, pending.step, pending.t_issue, t_end, pending.wait_ns)
