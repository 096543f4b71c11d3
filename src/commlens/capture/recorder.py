"""The per-process recorder: turns intercepted calls into rows of events.

It owns the rank's writer (opened once the process group exists), the
sequence counter, every async op waiting for completion (the interceptions
hand calls to its ``on_*`` methods and waits to :meth:`Recorder.before_wait`
and :meth:`Recorder.after_wait`; the time C++ holds the caller for ops in
flight, DDP's buckets at the end of backward, to :meth:`Recorder.hold_begin`
and :meth:`Recorder.hold_end`) and the fail-safe: the first error inside
recording is reported once on stderr and recording stops, while every
collective keeps running with the caller's arguments.

What a killed rank keeps: completed async ops are written by the recording
threads in batches (every :data:`COLLECT_AT`, at each step, wait and close),
and whatever is left of them is taken by the writer thread every
``flush_seconds``, just before it writes and fsyncs a part; right after, it
rewrites this rank's ``rank-NNNNN.json`` (step windows so far, clock offsets)
when that changed. So an op completed, or a step ended, more than
``flush_seconds`` plus one part's write before a SIGKILL is on disk (a step
of a rank json past :data:`META_SPACED_FROM` steps, once its spaced rewrite
comes).
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
from commlens.capture.inflight import StackDumps, write_inflight
from commlens.capture.intercept import Intercepted
from commlens.capture.ops import dtype_name
from commlens.capture.threads import keep_thread_state
from commlens.capture.timing import CudaTimer
from commlens.optable import P2P_OPS
from commlens.trace.layout import rank_meta_path
from commlens.trace.manifest import FORMAT_NAME, merge_manifest, write_json_atomic
from commlens.trace.packed import NO_PEER, PACKED_EVENT
from commlens.trace.schema import STEP0_FROM_SEQ
from commlens.trace.writer import EventWriter

Work = torch._C._distributed_c10d.Work
_pack = PACKED_EVENT.pack
# Completed ops are written in batches of this many (and at each step, wait
# and close): the code that writes them then runs warm, once per batch. The
# writer thread takes the rest every flush_seconds (Recorder._drain).
COLLECT_AT = 64
# After an optimizer step, the first of these starts the next step (a pipeline
# stage's receive of its next activations comes before its forward).
# Past META_SPACED_FROM step windows, the writer thread's rank-json rewrites use
# at most META_SHARE of the CPU time (encoding 100,000 steps holds the GIL for
# a while). Waiting on the disk is not counted: a slow fsync holds nothing the
# job needs. A smaller rank json (about 100 kB) is rewritten whenever it
# changed: one garbage collection inside a write would space it seconds apart.
META_SHARE = 0.01
META_SPACED_FROM = 1000


@dataclass(slots=True)
class Pending:
    """An async op issued but not yet complete (or still being waited on)."""

    head: tuple[Any, ...] | None  # kind .. is_async: the packed fields before the times
    step: int
    t_issue: int
    # Or, for an op read later (Recorder.on_deferred): (make_call, api, phase, module, seq).
    later: tuple[Any, ...] | None = None
    t_end: int | None = None
    wait_ns: int = 0
    waiting: bool = False
    done: bool = False
    key: int = 0  # id() of its Work in Recorder._pending


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


def _output_key(tensor: Any) -> int:
    """What finds a functional op's output again at its wait: its buffer's address.

    The wait may come on another tensor object over the same buffer (an
    autograd-registered op returns its output through a new tensor); one with
    no buffer (no elements, a tensor subclass) is known by its object.
    """
    try:
        return int(tensor.data_ptr()) or id(tensor)
    except Exception:
        return id(tensor)


def _same_output(issued: Any, waited: Any) -> bool:
    """Whether a wait's tensor is the output issued (or a tensor over its buffer)."""
    if issued is waited:
        return True
    try:
        return bool(
            issued.data_ptr() == waited.data_ptr()
            and issued.data_ptr()
            and issued.shape == waited.shape
            and issued.dtype == waited.dtype
        )
    except Exception:
        return False


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
        self._seq = itertools.count()  # next() is atomic: threads never share a seq
        self.disabled = False
        self.error = ""
        self.clock_info: dict[str, Any] = {}
        self.pid = os.getpid()
        self.t_start_ns = clock()
        self._lock = threading.Lock()
        # Async ops not yet written, by id() of their Work.
        self._pending: dict[int, tuple[Any, Pending]] = {}
        # Functional ops not yet waited on, by each output's buffer (_output_key).
        self._issued: dict[int, tuple[Any, Pending]] = {}
        # (pending, t_end) of completed ops, stamped by the backend's thread.
        self._done: deque[tuple[Pending, int]] = deque()
        # id() of the pending op of each completion callback not yet run.
        self._armed: set[int] = set()
        # (op, api, group, dtype, phase, module) -> the writer's id of that event kind.
        self._kinds: dict[tuple[Any, ...], int] = {}
        self.groups.on_change = self._kinds_changed
        self.steps.on_advance = self._collect
        self.steps.on_decided = self._setup_was_step0
        self._first_undecided: int | None = None  # seq of the first op set-up may not own
        self._new_locks()

    def _new_locks(self) -> None:
        # Held by the writer thread's drain and by resolve_deferred: ops read
        # later are never read from the writer thread once their groups may go.
        self._drain_lock = threading.Lock()
        self._cuda_lock = threading.Lock()  # CudaTimer is not thread-safe
        self._meta_lock = threading.Lock()  # one rank-json write at a time
        self._closing = False  # the writer thread's hooks do nothing from now on
        self._meta_seen: tuple[Any, ...] | None = None  # what the last rank json held
        self._meta_due = 0.0  # monotonic time before which no rewrite is made
        self._inflight_key: tuple[Any, ...] | None = None  # what inflight-NNNNN.json holds
        self.stack_dumps = StackDumps()

    def forked(self) -> None:
        """A forked child records on its own, under its own rank, once it has one."""
        self.writer = None
        self.rank = None
        self._seq = itertools.count()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._pending = {}
        self._issued = {}
        self._done = deque()
        self._armed = set()
        self._kinds = {}
        self._new_locks()

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
        self._write_unfinished(self._issued)  # functional ops never waited on
        self._settle()
        with self._drain_lock:  # a drain under way ends first; none starts again
            self._closing = True
        self._collect()
        for work, pending in list(self._pending.values()):
            if work is not None and pending.t_end is None:
                try:
                    if work.is_completed():
                        pending.t_end = self.clock()
                except Exception:
                    pass
        self._write_unfinished(self._pending)
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
                if self._lock.acquire(blocking=False):
                    self._lock.release()
                    self._collect()
            except Exception:
                pass
            finally:
                self._drain_lock.release()
        try:
            writer.close(timeout=5.0)
            self.write_meta(status)
            self._inflight_key = write_inflight(self, self._inflight_key)
            merge_manifest(self.run_dir)
        except Exception:
            pass

    def write_meta(self, status: str) -> None:
        """Write this rank's ``rank-NNNNN.json`` whole (temporary file, fsync, rename)."""
        assert self.rank is not None
        if not self._meta_lock.acquire(timeout=5.0):  # a signal handler never hangs here
            raise TimeoutError(f"rank {self.rank}: rank metadata still being written")
        try:
            # Copies taken under the lock: another thread may add steps or meta
            # meanwhile, and a rewrite never replaces a newer one with older copies.
            steps, meta, clock_info = list(self.steps.steps), dict(self.meta), self.clock_info
            data = {
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
                "steps": steps,
                "clock": clock_info,
                "recording_error": self.error,
                "meta": meta,
            }
            write_json_atomic(rank_meta_path(self.run_dir, self.rank), data, indent=None)
            self._meta_seen = (len(steps), clock_info, meta, data["events"])
        finally:
            self._meta_lock.release()

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
        clock, meta or events changed (writer thread).

        Past :data:`META_SPACED_FROM` steps, rewrites are spaced so that they
        use at most :data:`META_SHARE` of the CPU time; a smaller rank json is
        rewritten at every checkpoint that finds it changed, however slow the disk.
        """
        if self.disabled or self._closing or self.rank is None:
            return
        try:
            self._inflight_key = write_inflight(self, self._inflight_key)
        except Exception as exc:
            self.fail(exc)
        seen = self._meta_seen
        now = time.monotonic()
        if now < self._meta_due or (
            seen is not None
            and seen[0] == len(self.steps.steps)
            and seen[1] is self.clock_info
            and seen[2] == self.meta
            and seen[3] == (self.writer.n_events if self.writer else 0)
        ):
            return
        cpu = time.thread_time()
        try:
            self.write_meta("running")
        except Exception as exc:
            self.fail(exc)
        if len(self.steps.steps) >= META_SPACED_FROM:
            self._meta_due = now + (time.thread_time() - cpu) / META_SHARE

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
            self._collect()
        op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = call
        if self.steps.stepped and op in P2P_OPS:  # a pipeline's next step starts with p2p
            self.steps.p2p_after_step()
        # The group object itself names the kind; the registry keeps it alive.
        phase, module = current_phase_and_module(self.steps, frame, phase_hint)
        raw = (op, api, group, dtype, phase, module)
        kind = self._kinds.get(raw)
        if kind is None:
            kind = self._new_kind(raw)
        seq = next(self._seq)
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
            self._track(result, Pending(head, self.steps.step, t_issue))
        else:
            self._append(head, self.steps.step, t_issue, t_return, t_return - t_issue)
        return None

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
        first ``wait_tensor`` of an output (:meth:`before_output_wait`). No
        completion callback races these waits: they take no lock.
        """
        head = self.on_call(call, t_issue, t_issue, None, frame, api, phase_hint, defer=True)
        if head is None:
            return
        pending = Pending(head, self.steps.step, t_issue)
        for tensor in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
            self._issued[_output_key(tensor)] = (tensor, pending)

    def before_output_wait(self, tensor: Any) -> Pending | None:
        """The functional op that waiting on ``tensor`` (an output) completes, or None."""
        entry = self._issued.get(_output_key(tensor))
        if entry is None or not _same_output(entry[0], tensor):
            return None
        return entry[1]

    def after_output_wait(self, tensor: Any, pending: Pending, t0: int, t1: int) -> None:
        """The wait from ``t0`` to ``t1`` of :meth:`before_output_wait` ended: write the op."""
        self._issued.pop(_output_key(tensor), None)
        if pending.done:
            return  # another output of the op was waited on first
        pending.done = True
        pending.t_end = t1
        pending.wait_ns = t1 - t0
        if not self.disabled:
            self._safe_write(pending)

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
        self._track(work, Pending(None, self.steps.step, t_issue, later=later))
        if len(self._done) >= COLLECT_AT:
            self._collect()

    def resolve_deferred(self) -> None:
        """Read the calls of ops recorded by :meth:`on_deferred` now.

        Called before a process group is destroyed: afterwards its ranks can
        no longer be looked up. It holds the drain, so the writer thread is
        not reading any of them meanwhile. Never raises.
        """
        try:
            with self._drain_lock:
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
        make_call, api, phase, module, seq = later
        op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = make_call()
        raw = (op, api, group, dtype, phase, module)
        kind = self._kinds.get(raw)
        if kind is None:
            kind = self._new_kind(raw)
        return (kind, seq, count, bytes_in, bytes_out, size, NO_PEER if peer is None else peer,
                is_async)  # fmt: skip

    def _new_kind(self, raw: tuple[Any, ...]) -> int:
        """The writer's id of an event kind, its group given as the group object."""
        op, api, group, dtype, phase, module = raw
        info = self.groups.info(group)
        assert self.writer is not None
        kind = self.writer.kind(
            (op, api, info.name, info.ranks, info.size, info.role, dtype_name(dtype), phase,
             module)
        )  # fmt: skip
        self._kinds[raw] = kind
        return kind

    def _setup_was_step0(self) -> None:
        """No forward started the first step: the ops written as set-up from the first
        one outside a constructor on are step 0's (the reader counts them there)."""
        if self._first_undecided is not None:
            self.meta[STEP0_FROM_SEQ] = self._first_undecided

    def _kinds_changed(self) -> None:
        """Group names or roles changed: kinds are looked up afresh."""
        self._kinds.clear()

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
        """Write the ops whose completion was stamped (and nobody waits on).

        Runs on recording threads and on the writer thread (:meth:`_drain`):
        an op is claimed (``done``) under the lock, so exactly one writes it.
        """
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
                pending.done = True
                entry = self._pending.get(pending.key)
                if entry is not None and entry[1] is pending:
                    del self._pending[pending.key]
            if not self.disabled:
                self._safe_write(pending)

    def before_wait(self, work: Any) -> Pending | None:
        """The pending op that waiting on ``work`` completes, marked as waited on; or None."""
        if not self._pending:  # blocking ops wait internally: keep that path cheap
            return None
        with self._lock:
            entry = self._pending.get(id(work))
            if entry is None or entry[0] is not work:
                return None
            entry[1].waiting = True
            return entry[1]

    def after_wait(self, work: Any, pending: Pending, t0: int, t1: int) -> None:
        """The wait from ``t0`` to ``t1`` of :meth:`before_wait` ended: write the op."""
        self._collect()  # the op's own stamp, if its callback ran already
        with self._lock:
            pending.waiting = False
            pending.wait_ns += t1 - t0
            if pending.t_end is None:
                pending.t_end = t1
            self._pending.pop(id(work), None)
            if pending.done:
                return
            pending.done = True
        if not self.disabled:
            self._safe_write(pending)

    def hold_begin(self, since: int) -> list[tuple[Any, Pending]]:
        """The ops read later (:meth:`on_deferred`) issued since ``since`` and still in flight.

        Called where C++ starts to wait for them on the caller's behalf (DDP's
        buckets at the end of a backward pass): they are marked as waited
        on, to be written by :meth:`hold_end`. Never raises.
        """
        try:
            self._collect()
            with self._lock:
                held = [
                    (work, pending)
                    for work, pending in self._pending.values()
                    if pending.later is not None
                    and pending.t_issue >= since
                    and pending.t_end is None
                    and not pending.done
                ]
                for _, pending in held:
                    pending.waiting = True
            return held
        except Exception as exc:
            self.fail(exc)
            return []

    def hold_end(self, held: list[tuple[Any, Pending]], t0: int, t1: int) -> None:
        """The caller was held from ``t0`` to ``t1`` by the ops of :meth:`hold_begin`: write them.

        The held time is shared out in the order the ops completed: each
        op's wait is the part of the interval from the previous one's end to
        its own, so the waits add up to the time held. Never raises.
        """
        try:
            self._collect()  # completion stamps of the held ops
            start = t0
            for work, pending in sorted(held, key=lambda e: e[1].t_end or t1):
                end = min(pending.t_end or t1, t1)
                wait = max(0, end - start)
                start = max(start, end)
                self.after_wait(work, pending, end - wait, end)
        except Exception as exc:
            self.fail(exc)

    def _safe_write(self, pending: Pending) -> None:
        try:
            self._write(pending)
        except Exception as exc:
            self.fail(exc)

    def _write(self, pending: Pending) -> None:
        """Append the event of a claimed op (its ``done`` set by the caller)."""
        later = pending.later  # read first: resolve_deferred sets head, then clears later
        head = pending.head if later is None else self._head(later)
        pending.later = None  # lets go of the op's arguments
        assert head is not None  # an op has one or the other
        t_end = pending.t_end if pending.t_end is not None else pending.t_issue
        self._append(head, pending.step, pending.t_issue, t_end, pending.wait_ns)
