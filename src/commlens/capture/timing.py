"""GPU durations of NCCL ops from CUDA events, never a device synchronize per op.

A start event is recorded on the current stream before the call. For a
blocking op the end event is recorded after it (the current stream waits for
NCCL's stream at that point). For an async op it is recorded from the op's
future callback, which runs with current streams that wait for the op's own
(NCCL) stream, so it marks the op's completion on the device. Finished pairs
are read without blocking when the next op is recorded; ``drain`` reads the
rest once, at the end of the capture.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

# Writes one finished event: (head, step, t_issue_ns, t_end_ns, t_wait_ns).
Append = Callable[[tuple[Any, ...], int, int, int, int], None]


class _End:
    """The end event of one op, recorded now or by the op's future callback."""

    __slots__ = ("blocking", "event", "recorded")

    def __init__(self, blocking: bool) -> None:
        self.event = torch.cuda.Event(enable_timing=True)
        self.recorded = False
        self.blocking = blocking  # the caller waited for the whole op

    def record(self, _future: Any = None) -> None:
        self.event.record()
        self.recorded = True

    def query(self) -> bool:
        return self.recorded and bool(self.event.query())


class CudaTimer:
    def __init__(self) -> None:
        self._open: deque[tuple[Any, _End, tuple[Any, ...], int, int]] = deque()

    def start(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish(
        self,
        start: Any,
        append: Append,
        head: tuple[Any, ...],
        step: int,
        t_issue: int,
        work: Any = None,
    ) -> None:
        """Close the op begun at ``start``: now, or when ``work`` (async) completes."""
        end = _End(blocking=work is None)
        if work is None:
            end.record()
        else:
            try:
                work.get_future().add_done_callback(end.record)
            except Exception:
                end.record()  # no future: the issue time is all that is known
        self._open.append((start, end, head, step, t_issue))
        self.poll(append)

    def poll(self, append: Append) -> None:
        while self._open and self._open[0][1].query():
            self._write(append, *self._open.popleft())

    def drain(self, append: Append) -> None:
        while self._open:
            start, end, head, step, t_issue = self._open.popleft()
            if not end.recorded:  # never completed: no duration
                append(head, step, t_issue, t_issue, 0)
                continue
            end.event.synchronize()
            self._write(append, start, end, head, step, t_issue)

    @staticmethod
    def _write(
        append: Append,
        start: Any,
        end: _End,
        head: tuple[Any, ...],
        step: int,
        t_issue: int,
    ) -> None:
        gpu_ns = int(start.elapsed_time(end.event) * 1e6)
        append(head, step, t_issue, t_issue + gpu_ns, gpu_ns if end.blocking else 0)
