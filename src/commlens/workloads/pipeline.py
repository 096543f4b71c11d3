"""Pipeline schedules (GPipe and Megatron's 1F1B) over explicit point-to-point ops.

Per micro-batch and stage boundary, one activation ``[s(/tp), b, h]`` goes
forward (send on one stage, recv on the next) and its gradient comes back.
Where a stage both sends and receives in one step (1F1B's steady state), the
two ops go out together in ``batch_isend_irecv``, as Megatron does. Shapes
are known from the config, so no shape metadata travels.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from commlens.capture import phase
from commlens.workloads.groups import Groups

Forward = Callable[[int, torch.Tensor | None], torch.Tensor]


class P2P:
    """Activation and gradient exchange of one pipeline stage with its neighbours."""

    def __init__(
        self, groups: Groups, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ):
        self.prev, self.next = groups.prev_rank, groups.next_rank
        self.group = groups.pp
        self.shape, self.dtype, self.device = shape, dtype, device

    def _empty(self) -> torch.Tensor:
        return torch.empty(self.shape, dtype=self.dtype, device=self.device)

    def _batch(self, ops: list[dist.P2POp]) -> None:
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    def recv_forward(self) -> torch.Tensor | None:
        if self.prev is None:
            return None
        x = self._empty()
        with phase("forward"):  # the schedule runs outside modules: say which pass this is
            dist.recv(x, src=self.prev, group=self.group)  # activations from the previous stage
        return x.requires_grad_()

    def send_forward(self, y: torch.Tensor) -> None:
        if self.next is not None:
            with phase("forward"):
                dist.send(y.detach().contiguous(), dst=self.next, group=self.group)

    def recv_backward(self) -> torch.Tensor | None:
        if self.next is None:
            return None
        g = self._empty()
        with phase("backward"):
            dist.recv(g, src=self.next, group=self.group)  # gradient of our output
        return g

    def send_backward(self, g: torch.Tensor | None) -> None:
        if self.prev is not None:
            assert g is not None
            with phase("backward"):
                dist.send(g.contiguous(), dst=self.prev, group=self.group)

    def send_forward_recv_backward(self, y: torch.Tensor) -> torch.Tensor | None:
        if self.next is None:
            return None
        g = self._empty()
        # One phase for the pair: the stage waits here for the gradient (backward).
        with phase("backward"):
            self._batch(
                [
                    dist.P2POp(dist.isend, y.detach().contiguous(), self.next, self.group),
                    dist.P2POp(dist.irecv, g, self.next, self.group),
                ]
            )
        return g

    def send_backward_recv_forward(self, g: torch.Tensor | None) -> torch.Tensor | None:
        if self.prev is None:
            return None
        assert g is not None
        x = self._empty()
        # One phase for the pair: the stage waits here for the next activation.
        with phase("forward"):
            self._batch(
                [
                    dist.P2POp(dist.isend, g.contiguous(), self.prev, self.group),
                    dist.P2POp(dist.irecv, x, self.prev, self.group),
                ]
            )
        return x.requires_grad_()


def backward_step(
    x: torch.Tensor | None, y: torch.Tensor, grad: torch.Tensor | None
) -> torch.Tensor | None:
    """Backward of one micro-batch on this stage; the gradient of its input (None on stage 0)."""
    if grad is None:
        y.backward()  # last stage: y is the scaled loss
    else:
        torch.autograd.backward(y, grad_tensors=grad)
    return None if x is None else x.grad


def gpipe(forward: Forward, p2p: P2P, k: int) -> None:
    """All forwards, then all backwards (k micro-batches in flight)."""
    saved = []
    for i in range(k):
        x = p2p.recv_forward()
        y = forward(i, x)
        p2p.send_forward(y)
        saved.append((x, y))
    for x, y in saved:
        p2p.send_backward(backward_step(x, y, p2p.recv_backward()))


def one_f_one_b(forward: Forward, p2p: P2P, k: int, stage: int, stages: int) -> None:
    """Megatron's non-interleaved 1F1B: warm-up forwards, steady one-forward-one-backward,
    cool-down backwards; at most ``stages − stage`` micro-batches in flight."""
    warmup = min(stages - stage - 1, k)
    steady = k - warmup
    saved: list[tuple[torch.Tensor | None, torch.Tensor]] = []
    for i in range(warmup):
        x = p2p.recv_forward()
        y = forward(i, x)
        p2p.send_forward(y)
        saved.append((x, y))
    x = p2p.recv_forward() if steady else None
    for i in range(steady):
        y = forward(warmup + i, x)
        grad = p2p.send_forward_recv_backward(y)
        saved.append((x, y))
        x_old, y_old = saved.pop(0)
        grad_in = backward_step(x_old, y_old, grad)
        if i == steady - 1:
            p2p.send_backward(grad_in)
        else:
            x = p2p.send_backward_recv_forward(grad_in)
    for _ in range(warmup):
        x_old, y_old = saved.pop(0)
        p2p.send_backward(backward_step(x_old, y_old, p2p.recv_backward()))
