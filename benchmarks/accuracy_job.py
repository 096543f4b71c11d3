"""A training job whose compute does not use the CPU, for the what-if accuracy benchmark.

    python benchmarks/accuracy_job.py ddp|pp STEPS

Each block sleeps a fixed time in forward and in backward instead of computing,
so the step varies only with the communication (and the host's share of it),
not with the host's load on the model's arithmetic.

- ``ddp``: eight blocks of a 256×256 linear layer under DDP, gradients in
  about four buckets that all-reduce while the earlier blocks' backward still
  sleeps, then a blocking all-reduce of the loss (the step's metric).
- ``pp``: the ranks of the first half are stage 0, those of the second half
  stage 1 (on two emulated nodes: one stage per node), paired ``r`` with
  ``r + n/2``; four micro-batches, each a 256 KB activation sent forward and a
  256 KB gradient sent back with blocking send/recv (GPipe order: every
  transfer on the critical path), then the loss all-reduce.

commlens traces it as any script (``commlens trace --nproc 4 --nodes 2 --
python benchmarks/accuracy_job.py ddp 12``); a step ends at the optimizer's step.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 256
BLOCKS = 8
FORWARD_S = 0.004
BACKWARD_S = 0.008
MICROBATCHES = 4
ACTIVATION = 64 * 1024  # float32 elements: 256 KB a message
PP_FORWARD_S = 0.010
PP_BACKWARD_S = 0.020


class _Sleep(torch.autograd.Function):
    """Identity whose forward and backward each sleep a fixed time."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor, back_s: float) -> torch.Tensor:  # type: ignore[override]
        time.sleep(FORWARD_S)
        ctx.back_s = back_s  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        time.sleep(ctx.back_s)  # type: ignore[attr-defined]
        return grad, None


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Sleep.apply(self.linear(x), BACKWARD_S)  # type: ignore[no-any-return]


def ddp_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    loss = model(x).square().mean()
    loss.backward()  # buckets all-reduce beside the earlier blocks' backward
    opt.step()
    opt.zero_grad()
    metric = loss.detach().reshape(1)
    dist.all_reduce(metric)  # blocking: the step's metric


def pp_step(rank: int, world: int, param: nn.Parameter, opt: torch.optim.Optimizer) -> None:
    half = world // 2
    first = rank < half
    peer = rank + half if first else rank - half
    act = torch.zeros(ACTIVATION)
    for _ in range(MICROBATCHES):
        if first:
            time.sleep(PP_FORWARD_S)
            dist.send(act, peer)
        else:
            dist.recv(act, peer)
            time.sleep(PP_FORWARD_S)
    for _ in range(MICROBATCHES):
        if first:
            dist.recv(act, peer)
            time.sleep(PP_BACKWARD_S)
        else:
            time.sleep(PP_BACKWARD_S)
            dist.send(act, peer)
    param.grad = torch.ones_like(param)
    opt.step()
    opt.zero_grad()
    metric = torch.ones(1)
    dist.all_reduce(metric)  # blocking: the step's metric


def main(mode: str, steps: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    if mode == "ddp":
        model = DDP(nn.Sequential(*[Block() for _ in range(BLOCKS)]), bucket_cap_mb=0.5)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(4, WIDTH)
        for _ in range(steps):
            ddp_step(model, opt, x)
    elif mode == "pp":
        if world % 2:
            raise SystemExit(f"pp needs an even number of ranks, got {world}")
        param = nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([param], lr=1e-3)
        for _ in range(steps):
            pp_step(rank, world, param, opt)
    else:
        raise SystemExit(f"mode must be ddp or pp, got {mode!r}")
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: accuracy_job.py ddp|pp STEPS")
    main(sys.argv[1], int(sys.argv[2]))
