"""The per-process recorder: turns intercepted calls into rows of events.

It owns the rank's writer (opened once the process group exists), the
sequence counter and the fail-safe: the first error inside recording is
reported once on stderr and recording stops, while every collective keeps
running with the caller's arguments. Its parts, one concern each: the ops in
flight (:mod:`commlens.capture.pending`: async ops, functional ops, their
waits; DDP's holds in :mod:`commlens.capture.ddp`), the event kinds
(:mod:`commlens.capture.kinds`), the rank's json (:mod:`commlens.capture.rankfile`)
and its ops in flight on disk (:mod:`commlens.capture.inflight`). What stays
here: the per-op path (:meth:`Recorder.on_call`, one frame), opening,
closing (also on a signal), the writer thread's hooks and a fork's reset.

What a killed rank keeps: completed async ops are written by the recording
threads in batches (every :data:`COLLECT_AT`, at each step, wait and close),
and whatever is left of them is taken by the writer thread every
``flush_seconds``, just before it writes and fsyncs a part; right after, it
rewrites this rank's ``rank-NNNNN.json`` (step windows so far, clock offsets)
when that changed. So an op completed, or a step ended, more than
``flush_seconds`` plus one part's write before a SIGKILL is on disk (a step
of a rank json past :data:`commlens.capture.rankfile.META_SPACED_FROM` steps,
once its spaced rewrite comes).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from commlens.capture.callsites import CallSiteTable
from commlens.capture.context import StepTracker, current_phase_and_module
from commlens.capture.groups import GroupRegistry
from commlens.capture.inflight import StackDumps, write_inflight
from commlens.capture.intercept import Intercepted
from commlens.capture.kinds import EventKinds
from commlens.capture.pending import Pending, PendingOps
from commlens.capture.rankfile import RankFile
from commlens.capture.timing import CudaTimer
from commlens.optable import P2P_OPS
from commlens.trace.manifest import merge_manifest
from commlens.trace.packed import NO_PEER, PACKED_EVENT
from commlens.trace.schema import STEP0_FROM_SEQ
from commlens.trace.writer import EventWriter

Work = torch._C._distributed_c10d.Work
_pack = PACKED_EVENT.pack
# Completed ops are written in batches of this many (and at each step, wait
# and close): the code that writes them then runs warm, once per batch. The
# writer thread takes the rest every flush_seconds (Recorder._drain).
COLLECT_AT = 64


def _backend_name() -> str:
    """The default group's backend; for one made without naming it (``init_device_mesh``,
    ``init_process_group()``: "undefined"), the one it uses for this process's tensors."""
    backend = str(dist.get_backend())
    if backend != "undefined":
        return backend
    config = str(dist.get_backend_config())  # "cpu:gloo,cuda:nccl"
    devices = dict(item.split(":", 1) for item in config.split(",") if ":" in item)
    device = "cuda" if torch.cuda.is_available() and "cuda" in devices else "cpu"
    return devices.get(device, backend)


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
        # c10d kernel is registered (capture.c10d); None otherwise.
        self.below_autograd: Any = None
        self.writer: EventWriter | None = None
        self.rank: int | None = None
        self.world_size: int | None = None
        self.backend = ""
        self.disabled = False
        self.error = ""
        self.clock_info: dict[str, Any] = {}
        self.t_start_ns = clock()
        self.kinds = EventKinds(self.groups)
        self._kinds = self.kinds.table  # the per-op path reads the table itself
        self.steps.on_advance = self._collect
        self.steps.on_decided = self._setup_was_step0
        self._first_undecided: int | None = None  # seq of the first op set-up may not own
        self._fresh()

    def _fresh(self) -> None:
        """What a forked child starts again: counters, ops in flight, locks, files."""
        self.pid = os.getpid()
        self._seq = itertools.count()  # next() is atomic: threads never share a seq
        self.callsites = CallSiteTable()  # where each op was called (the per-op path's)
        self._site_ids = self.callsites.ids
        self._site_log = self.callsites.log
        self.ops = PendingOps(self.clock, self._write_claimed)
        self._done = self.ops.done  # the per-op path tests its length
        # Held by the writer thread's drain and by resolve_deferred: ops read
        # later are never read from the writer thread once their groups may go.
        self._drain_lock = threading.Lock()
        self._cuda_lock = threading.Lock()  # CudaTimer is not thread-safe
        self._closing = False  # the writer thread's hooks do nothing from now on
        self._inflight_key: tuple[Any, ...] | None = None  # what inflight-NNNNN.json holds
        self.rank_file = RankFile()
        self.stack_dumps = StackDumps()

    def forked(self) -> None:
        """A forked child records on its own, under its own rank, once it has one."""
        self.writer = None
        self.rank = None
        self._kinds.clear()
        self._fresh()

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
            self.backend = _backend_name()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.writer = EventWriter(
                self.run_dir,
                self.rank,
                flush_events=self.flush_events,
                flush_seconds=self.flush_seconds,
                on_error=self.fail,
                drain=self._drain,
                checkpoint=self._checkpoint,
            )
            self.write_meta("running")
            self.stack_dumps.register(self.run_dir, self.rank)
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
        self._write_unfinished(self.ops.issued)  # functional ops never waited on
        self.ops.settle()
        with self._drain_lock:  # a drain under way ends first; none starts again
            self._closing = True
        self._collect()
        self.ops.stamp_completed()
        self._write_unfinished(self.ops.table)
        if self.writer is None:
            return
        try:
            with self._cuda_lock:
                self.cuda.drain(self._append)
            self.writer.close()
        except Exception as exc:
            self.fail(exc)
        try:
            self.note_roles()
            self.write_meta("ok" if not self.error else "recording-failed")
            self._inflight_key = write_inflight(self, self._inflight_key)
            self._write_sites(blocking=True)
            self.stack_dumps.unregister()
            merge_manifest(self.run_dir)
        except Exception as exc:
            self.fail(exc)

    def note_roles(self) -> None:
        """Keep the final role of each group in the rank's metadata (``group_roles``).

        For events written before their group's role was known: a reader
        takes the role of an event's group from this table. Called before
        the groups are destroyed and at close.
        """
        try:
            roles = dict(self.meta.get("group_roles") or {})
            roles.update(self.groups.roles())
            self.meta["group_roles"] = roles
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
        if writer.busy():
            return
        self._closing = True
        # Completed ops not yet written, unless the interrupted thread (or the
        # writer thread, which then writes them) is collecting them.
        if self._drain_lock.acquire(blocking=False):
            try:
                if self.ops.lock.acquire(blocking=False):
                    self.ops.lock.release()
                    self._collect()
            except Exception:
                pass
            finally:
                self._drain_lock.release()
        try:
            writer.close(timeout=5.0)
            self.write_meta(status)
            self._inflight_key = write_inflight(self, self._inflight_key)
            self._write_sites(blocking=False)  # the interrupted thread may hold the table
            merge_manifest(self.run_dir)
        except Exception:
            pass

    def _write_sites(self, *, blocking: bool) -> None:
        """Append the call sites and (seq, site) records not yet on disk."""
        if self.rank is not None:
            self.callsites.write(self.run_dir, self.rank, blocking=blocking)

    def write_meta(self, status: str) -> None:
        """Write this rank's ``rank-NNNNN.json`` whole (:class:`RankFile`)."""
        self.rank_file.write(self, status)

    # -- the writer thread's hooks ------------------------------------------
    def _drain(self) -> None:
        """Write the completed ops no recording thread has collected (writer thread).

        Skipped while another thread holds the drain (it is collecting them).
        """
        if self.disabled or not self._drain_lock.acquire(blocking=False):
            return
        try:
            if self._closing:
                return
            self._collect()
            if self.gpu and self._cuda_lock.acquire(blocking=False):
                try:
                    self.cuda.poll(self._append)
                finally:
                    self._cuda_lock.release()
        except Exception as exc:
            self.fail(exc)
        finally:
            self._drain_lock.release()

    def _checkpoint(self) -> None:
        """Rewrite the rank's ops in flight if they changed, and the rank json if its steps,
        clock, meta or events changed (writer thread; :meth:`RankFile.rewrite_if_changed`)."""
        if self.disabled or self._closing or self.rank is None:
            return
        try:
            self._inflight_key = write_inflight(self, self._inflight_key)
            self._write_sites(blocking=True)
        except Exception as exc:
            self.fail(exc)
        try:
            self.rank_file.rewrite_if_changed(self)
        except Exception as exc:
            self.fail(exc)

    # -- recording ---------------------------------------------------------
    def on_call(
        self,
        call: Intercepted,
        t_issue: int,
        t_return: int,
        result: Any,
        frame: FrameType | None,
        api: str,
        phase_hint: str,
        gpu_token: Any = None,
        *,
        defer: bool = False,
    ) -> tuple[Any, ...] | None:
        """Record one call that returned ``result``; ``api`` names the capture path.

        The hot path of the capture, kept in one frame (the record step of
        :func:`commlens.capture.intercept.intercept`). With ``defer`` the
        event is not written: its head (the packed fields before the times)
        is returned for the caller to finish once the op completes.
        """
        writer = self.writer
        if writer is None:
            writer = self.ensure_open()
            if writer is None:
                return None
        if len(self._done) >= COLLECT_AT:
            self.ops.collect()
        op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = call
        if self.steps.stepped and op in P2P_OPS:  # a pipeline's next step starts with p2p
            self.steps.p2p_after_step()
        # The group object itself names the kind; the registry keeps it alive.
        phase, module = current_phase_and_module(self.steps, frame, phase_hint)
        raw = (op, api, group, dtype, phase, module)
        kind = self._kinds.get(raw)
        if kind is None:
            kind = self.kinds.new(raw, writer)
        seq = next(self._seq)
        if frame is not None:  # its call site, interned (capture.callsites)
            site_key = (frame.f_code, frame.f_lineno)
            site = self._site_ids.get(site_key)
            if site is None:
                site = self.callsites.new(site_key)
            self._site_log.append((seq, site))
        if self._first_undecided is None and self.steps.undecided:
            self._first_undecided = seq
            self.steps.t_undecided = t_issue
        if peer is None:
            peer = NO_PEER
        if result is None and gpu_token is None and not defer:  # a blocking CPU op
            event = _pack(kind, seq, count, bytes_in, bytes_out, size, peer, is_async, t_issue,
                          t_return, t_return - t_issue, self.steps.step)  # fmt: skip
            writer.append_packed(event)
            return None
        head = (kind, seq, count, bytes_in, bytes_out, size, peer, is_async)
        if defer:
            return head
        if gpu_token is not None:  # CUDA events time it on the device
            work = result if isinstance(result, Work) else None
            with self._cuda_lock:  # the writer thread polls finished ones too
                self.cuda.finish(gpu_token, self._append, head, self.steps.step, t_issue, work)
        elif isinstance(result, Work):
            self.ops.track(result, Pending(head, self.steps.step, t_issue))
        else:
            self._append(head, self.steps.step, t_issue, t_return, t_return - t_issue)
        return None

    def on_issued(
        self,
        call: Intercepted,
        t_issue: int,
        _t_return: int,
        outputs: Any,
        frame: FrameType | None,
        api: str,
        phase_hint: str,
        _gpu_token: Any = None,
    ) -> None:
        """Record a call that completes when one of its ``outputs`` is waited on.

        For functional collectives: the op runs from its issue until the
        first ``wait_tensor`` of an output (:meth:`PendingOps.before_output_wait`).
        """
        head = self.on_call(call, t_issue, t_issue, None, frame, api, phase_hint, defer=True)
        if head is not None:
            self.ops.issue_outputs(outputs, Pending(head, self.steps.step, t_issue))

    def on_deferred(
        self,
        make_call: Callable[[], Intercepted],
        t_issue: int,
        work: Any,
        frame: FrameType | None,
        api: str,
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
        later = (make_call, api, phase, module, next(self._seq))
        if frame is not None:
            self.callsites.note(later[4], frame)
        self.ops.track(work, Pending(None, self.steps.step, t_issue, later=later))
        if len(self._done) >= COLLECT_AT:
            self.ops.collect()

    def resolve_deferred(self) -> None:
        """Read the calls of ops recorded by :meth:`on_deferred` now.

        Called before a process group is destroyed: afterwards its ranks can
        no longer be looked up. It holds the drain, so the writer thread is
        not reading any of them meanwhile. Never raises.
        """
        try:
            with self._drain_lock:
                self.ops.collect()
                assert self.writer is not None
                for _, pending in list(self.ops.table.values()):
                    later = pending.later
                    if later is not None and pending.head is None:
                        pending.head = self.kinds.head(later, self.writer)
                        pending.later = None
        except Exception as exc:
            self.fail(exc)

    def _setup_was_step0(self) -> None:
        """No forward started the first step: the ops written as set-up from the first
        one outside a constructor on are step 0's (the reader counts them there)."""
        if self._first_undecided is not None:
            self.meta[STEP0_FROM_SEQ] = self._first_undecided

    def _collect(self) -> None:
        """Write the ops whose completion was stamped (:meth:`PendingOps.collect`)."""
        self.ops.collect()

    def _append(self, head: tuple[Any, ...], step: int, t0: int, t1: int, wait: int) -> None:
        assert self.writer is not None
        self.writer.append_packed(_pack(*head, t0, t1, wait, step))

    def _write_unfinished(self, ops: dict[int, tuple[Any, Pending]]) -> None:
        """Write the ops of ``ops`` not written yet (even if recording failed), then forget them."""
        for _, pending in list(ops.values()):
            if pending.done or self.writer is None:
                continue
            pending.done = True
            try:
                self._write(pending)
            except Exception as exc:
                self.fail(exc)
        ops.clear()

    def _write_claimed(self, pending: Pending) -> None:
        """Write an op claimed by :class:`PendingOps` (unless recording stopped)."""
        if self.disabled:
            return
        try:
            self._write(pending)
        except Exception as exc:
            self.fail(exc)

    def _write(self, pending: Pending) -> None:
        """Append the event of a claimed op (its ``done`` set by the caller)."""
        later = pending.later  # read first: resolve_deferred sets head, then clears later
        assert self.writer is not None
        head = pending.head if later is None else self.kinds.head(later, self.writer)
        pending.later = None  # lets go of the op's arguments
        assert head is not None  # an op has one or the other
        t_end = pending.t_end if pending.t_end is not None else pending.t_issue
        self._append(head, pending.step, pending.t_issue, t_end, pending.wait_ns)
