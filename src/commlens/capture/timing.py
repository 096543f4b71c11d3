"""GPU durations of NCCL ops from CUDA events, never a device synchronize per op.

A start event is recorded on the current stream before the call and an end
event after it (the current stream waits for NCCL's stream at that point for
a blocking op). Finished pairs are read without blocking when the next op is
recorded; ``drain`` reads the rest once, at the end of the capture.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder


class CudaTimer:
    def __init__(self) -> None:
        self._open: deque[tuple[Any, Any, tuple[Any, ...], tuple[Any, ...], int]] = deque()

    @staticmethod
    def wanted(tensor: torch.Tensor | None) -> bool:
        return tensor is not None and tensor.is_cuda

    def start(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish(
        self,
        start: Any,
        recorder: Recorder,
        head: tuple[Any, ...],
        tail: tuple[Any, ...],
        t_issue: int,
    ) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._open.append((start, end, head, tail, t_issue))
        self.poll(recorder)

    def poll(self, recorder: Recorder) -> None:
        while self._open and self._open[0][1].query():
            self._write(recorder, *self._open.popleft())

    def drain(self, recorder: Recorder) -> None:
        while self._open:
            start, end, head, tail, t_issue = self._open.popleft()
            end.synchronize()
            self._write(recorder, start, end, head, tail, t_issue)

    @staticmethod
    def _write(
        recorder: Recorder,
        start: Any,
        end: Any,
        head: tuple[Any, ...],
        tail: tuple[Any, ...],
        t_issue: int,
    ) -> None:
        gpu_ns = int(start.elapsed_time(end) * 1e6)
        recorder._append(head, tail, t_issue, t_issue + gpu_ns, gpu_ns)
