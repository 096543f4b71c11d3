"""GPU durations of NCCL ops from CUDA events, never a device synchronize per op.

A start event is recorded on the current stream before the call and an end
event after it (the current stream waits for NCCL's stream at that point for
a blocking op). Finished pairs are read without blocking when the next op is
recorded; ``drain`` reads the rest once, at the end of the capture.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

# Writes one finished event: (head, step, t_issue_ns, t_end_ns, t_wait_ns).
Append = Callable[[tuple[Any, ...], int, int, int, int], None]


class CudaTimer:
    def __init__(self) -> None:
        self._open: deque[tuple[Any, Any, tuple[Any, ...], int, int]] = deque()

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
    ) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._open.append((start, end, head, step, t_issue))
        self.poll(append)

    def poll(self, append: Append) -> None:
        while self._open and self._open[0][1].query():
            self._write(append, *self._open.popleft())

    def drain(self, append: Append) -> None:
        while self._open:
            start, end, head, step, t_issue = self._open.popleft()
            end.synchronize()
            self._write(append, start, end, head, step, t_issue)

    @staticmethod
    def _write(
        append: Append,
        start: Any,
        end: Any,
        head: tuple[Any, ...],
        step: int,
        t_issue: int,
    ) -> None:
        gpu_ns = int(start.elapsed_time(end) * 1e6)
        append(head, step, t_issue, t_issue + gpu_ns, gpu_ns)
