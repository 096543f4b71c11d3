"""``commlens.capture(dir)``: start and stop recording in this process.

Starting installs the interceptions (Python API, DDP buckets, functional
collectives, optimizer-step hooks) and writes this rank's metadata with its
clock offset and where it runs (``meta.launch``: host, node, local rank);
while it runs the writer thread keeps that file current (step windows so
far); stopping removes the interceptions, joins the rank file, writes this
rank's final metadata and re-merges ``run.json``. One capture can be active
per process. The object reloads what it wrote with ``load()``.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import torch.distributed as dist

from commlens.capture import ddp, frameworks, functional, mesh, python
from commlens.capture.clock import (
    all_ready,
    clock_record,
    measure_offset,
    register_process,
    shares_rank0_clock,
)
from commlens.capture.intercept import ACTIVE
from commlens.capture.patching import change, restore_all
from commlens.capture.recorder import Recorder
from commlens.errors import UsageError
from commlens.trace.jobid import launch_facts


def _after_fork() -> None:
    if ACTIVE.capture is not None:
        ACTIVE.capture.recorder.forked()


os.register_at_fork(after_in_child=_after_fork)


class Capture:
    """Records every communication op of this process into ``out_dir``."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        meta: dict[str, Any] | None = None,
        align_clocks: bool = True,
        flush_events: int = 16384,
        flush_seconds: float = 2.0,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.align_clocks = align_clocks
        self.recorder = Recorder(
            self.out_dir,
            meta={"launch": launch_facts(), **(meta or {})},
            flush_events=flush_events,
            flush_seconds=flush_seconds,
        )
        self._start_offset: tuple[int, int] | None = None
        self._t_offset = 0
        self._shared_clock = False  # this rank reads rank 0's clock (one host)
        self._ended = False
        self._old_sigterm: Any = None
        self.active = False

    # -- public ------------------------------------------------------------
    def start(self) -> Capture:
        if ACTIVE.capture is not None:
            raise UsageError("a commlens capture is already active in this process")
        ACTIVE.capture = self
        try:
            python.install(self._on_init, self._on_destroy)
            ddp.install()
            mesh.install()
            functional.install()
            self.recorder.steps.install()
            # Undone with the patches (and while a measurement suspends them).
            change(self.recorder.steps.wrap_calls, self.recorder.steps.unwrap_calls)
            frameworks.install(self.recorder.steps)
            self.recorder.steps.on_first_forward = self._late_hooks
        except Exception:
            restore_all()
            ACTIVE.capture = None
            raise
        ACTIVE.recorder = self.recorder
        self.active = True
        atexit.register(self.stop)  # a capture started and never stopped still finishes
        self._install_sigterm()
        if dist.is_available() and dist.is_initialized():
            self._on_init()
        return self

    def stop(self) -> None:
        if not self.active:
            return
        atexit.unregister(self.stop)
        if not self._ended and dist.is_available() and dist.is_initialized():
            self._on_destroy()
        self._detach()
        self.recorder.close()

    def step(self) -> None:
        """Mark the end of a training step (for loops without an optimizer)."""
        self.recorder.steps.mark()

    def add_meta(self, key: str, value: Any) -> None:
        """Store a JSON-able value in this rank's manifest entry (and the run's)."""
        self.recorder.meta[key] = value

    def set_group_role(self, group: Any, role: str) -> None:
        self.recorder.groups.set_role(group, role)

    def load(self) -> Any:
        from commlens.trace.reader import load_run

        return load_run(self.out_dir)

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._ended = True  # peers may be gone: no end-of-run handshake
        self.stop()

    # -- internals ---------------------------------------------------------
    def _install_sigterm(self) -> None:
        """On SIGTERM (launchers stop surviving ranks so), finish the files, then die.

        Only when nobody else handles SIGTERM; the process still ends by the signal.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_sigterm(signum: int, _frame: Any) -> None:
            # A second SIGTERM (a launcher stopping the ranks after one ended) must not
            # re-enter the close half-way through it.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.recorder.close_on_signal("terminated")
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._old_sigterm = signal.SIG_DFL

    def _detach(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
        ACTIVE.recorder = None
        self.recorder.steps.uninstall()
        restore_all()
        frameworks.uninstall()
        self.active = False
        ACTIVE.capture = None

    def _late_hooks(self) -> None:
        """Patch frameworks imported since the capture started (pipelining, DeepSpeed)."""
        try:
            frameworks.install(self.recorder.steps)
        except Exception as exc:
            self.recorder.fail(exc)

    def _on_init(self) -> None:
        rec = self.recorder
        rec.groups.forget_default()
        self._late_hooks()
        try:
            if rec.ensure_open() is None:
                return
            rec.steps.restart()
            if self.align_clocks:
                register_process()  # the end's rendezvous then sees this rank die
                self._shared_clock = shares_rank0_clock()
                self._t_offset = time.time_ns()
                self._start_offset = measure_offset()
                rec.clock_info = clock_record(
                    self._start_offset, self._t_offset, None, 0, shared=self._shared_clock
                )
                rec.write_meta("running")  # the offsets survive even a rank killed at once
        except Exception as exc:
            rec.fail(exc)

    def _on_destroy(self) -> None:
        """The end-of-run clock measurement, while the process group still exists."""
        if self._ended:
            return
        self._ended = True
        rec = self.recorder
        if rec.disabled or rec.writer is None or not self.align_clocks:
            return
        try:
            if self._start_offset is not None and all_ready("clock-end"):
                t_end = time.time_ns()
                end = measure_offset()
                rec.clock_info = clock_record(
                    self._start_offset, self._t_offset, end, t_end, shared=self._shared_clock
                )
        except Exception as exc:
            rec.fail(exc)


def capture(out_dir: str | os.PathLike[str], **kwargs: Any) -> Capture:
    """``with commlens.capture("runs/x"): ...`` records this process's communication."""
    return Capture(out_dir, **kwargs)


def active() -> Capture | None:
    """The capture active in this process, or None."""
    return ACTIVE.capture


def step() -> None:
    """Mark a step boundary in the active capture (no-op without one)."""
    if ACTIVE.capture is not None:
        ACTIVE.capture.step()


def set_group_role(group: Any, role: str) -> None:
    """Name the role (dp/tp/pp/ep/cp) of a process group for the active capture."""
    if ACTIVE.capture is not None:
        ACTIVE.capture.set_group_role(group, role)


def add_meta(key: str, value: Any) -> None:
    """Add a JSON-able entry to this rank's manifest in the active capture."""
    if ACTIVE.capture is not None:
        ACTIVE.capture.add_meta(key, value)


def start_from_env() -> Capture | None:
    """Start a capture when ``COMMLENS_TRACE_DIR`` is set (``commlens trace``)."""
    out = os.environ.get("COMMLENS_TRACE_DIR")
    if not out or ACTIVE.capture is not None:
        return None
    return Capture(out).start()
