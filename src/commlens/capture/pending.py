"""The ops a rank has issued and not yet written: async ops timed to completion,
functional ops waiting for the wait on an output, and their waits.

An async op's completion callback runs on the backend's own thread (gloo's
worker, which the op's waiter and the backend's next op wait on), so it does
the least it can: it stamps the time and queues the op, on a thread state it
keeps (:mod:`commlens.capture.threads`). The recording threads, and the writer
thread's drain, write the stamped ops (:meth:`PendingOps.collect`); an op is
claimed (``done``) under the lock, so exactly one thread writes it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commlens.capture.threads import keep_thread_state


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
    key: int = 0  # id() of its Work in PendingOps.table


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


class PendingOps:
    """A rank's ops in flight; ``write`` appends the event of a claimed op."""

    def __init__(self, clock: Callable[[], int], write: Callable[[Pending], None]) -> None:
        self.clock = clock
        self.write = write
        self.lock = threading.Lock()
        # Async ops not yet written, by id() of their Work.
        self.table: dict[int, tuple[Any, Pending]] = {}
        # Functional ops not yet waited on, by each output's buffer (_output_key).
        self.issued: dict[int, tuple[Any, Pending]] = {}
        # (pending, t_end) of completed ops, stamped by the backend's thread.
        self.done: deque[tuple[Pending, int]] = deque()
        # id() of the pending op of each completion callback not yet run.
        self.armed: set[int] = set()

    def track(self, work: Any, pending: Pending) -> None:
        """Time ``work`` to completion (a callback on the backend's thread stamps it)."""
        pending.key = key = id(work)
        self.table[key] = (work, pending)  # one store: atomic, no lock needed
        done, clock, armed = self.done.append, self.clock, self.armed
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

    def settle(self, timeout: float = 5.0) -> None:
        """Give ops still in flight (at most ``timeout`` seconds) to complete.

        Their completion callbacks must run while the interpreter is whole:
        one that fires on the backend's thread during interpreter shutdown
        aborts the process, which untraced would have exited normally.
        """
        deadline = time.monotonic() + timeout
        while self.armed and time.monotonic() < deadline:
            time.sleep(0.001)

    def collect(self) -> None:
        """Write the ops whose completion was stamped (and nobody waits on)."""
        done = self.done
        while done:
            try:
                pending, t_end = done.popleft()
            except IndexError:
                return  # another thread took the last one
            with self.lock:
                if pending.t_end is None:
                    pending.t_end = t_end
                if pending.waiting or pending.done:
                    continue
                pending.done = True
                entry = self.table.get(pending.key)
                if entry is not None and entry[1] is pending:
                    del self.table[pending.key]
            self.write(pending)

    def stamp_completed(self) -> None:
        """At close: an op whose Work completed without its callback is stamped now."""
        for work, pending in list(self.table.values()):
            if work is not None and pending.t_end is None:
                try:
                    if work.is_completed():
                        pending.t_end = self.clock()
                except Exception:
                    pass

    def before_wait(self, work: Any) -> Pending | None:
        """The pending op that waiting on ``work`` completes, marked as waited on; or None."""
        if not self.table:  # blocking ops wait internally: keep that path cheap
            return None
        with self.lock:
            entry = self.table.get(id(work))
            if entry is None or entry[0] is not work:
                return None
            entry[1].waiting = True
            return entry[1]

    def after_wait(self, work: Any, pending: Pending, t0: int, t1: int) -> None:
        """The wait from ``t0`` to ``t1`` of :meth:`before_wait` ended: write the op."""
        self.collect()  # the op's own stamp, if its callback ran already
        with self.lock:
            pending.waiting = False
            pending.wait_ns += t1 - t0
            if pending.t_end is None:
                pending.t_end = t1
            self.table.pop(id(work), None)
            if pending.done:
                return
            pending.done = True
        self.write(pending)

    def issue_outputs(self, outputs: Any, pending: Pending) -> None:
        """A functional op completes when one of its ``outputs`` is waited on.

        No completion callback races these waits: they take no lock.
        """
        for tensor in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
            self.issued[_output_key(tensor)] = (tensor, pending)

    def before_output_wait(self, tensor: Any) -> Pending | None:
        """The functional op that waiting on ``tensor`` (an output) completes, or None."""
        entry = self.issued.get(_output_key(tensor))
        if entry is None or not _same_output(entry[0], tensor):
            return None
        return entry[1]

    def after_output_wait(self, tensor: Any, pending: Pending, t0: int, t1: int) -> None:
        """The wait from ``t0`` to ``t1`` of :meth:`before_output_wait` ended: write the op."""
        self.issued.pop(_output_key(tensor), None)
        if pending.done:
            return  # another output of the op was waited on first
        pending.done = True
        pending.t_end = t1
        pending.wait_ns = t1 - t0
        self.write(pending)
