"""Plain-torch jobs in the shapes Lightning, Fabric and PyTorch's tensor-parallel
example give them (gloo, CPU, no annotation)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.frameworks.observe import profiled_ops

STEPS = 3


def tp_job(rank: int, world: int, out: str) -> dict[str, Any]:
    """PyTorch's tensor-parallel example: ColwiseParallel/RowwiseParallel over a 1-D
    mesh without dimension names, which also makes the default group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from torch.profiler import ProfilerActivity, profile

    warnings.simplefilter("ignore")
    with commlens.capture(out):
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
        model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(STEPS):
                model(torch.rand(32, 256)).sum().backward()
                opt.step()
                opt.zero_grad()
        names = [e.name for e in prof.events() if e.name == "_c10d_functional::all_reduce"]
        times = sorted(e.cpu_time_total / 1e6 for e in prof.events()
                       if e.name == "_c10d_functional::wait_tensor")  # fmt: skip
        dist.destroy_process_group()
    return {"all_reduce": len(names), "wait_s": times}


class Wrapper(nn.Module):
    """A framework's wrapper around the user's module (Fabric's ``_FabricModule``)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self._original_module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._original_module(x)


def fsdp2_wrapped_job(rank: int, world: int, out: str) -> None:
    """FSDP2 over each block and the model, called through an outer wrapper."""
    from torch.distributed.fsdp import fully_shard

    with commlens.capture(out, align_clocks=False):
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        for i in (0, 2):
            fully_shard(model[i])
        fully_shard(model)
        outer = Wrapper(model)
        opt = torch.optim.SGD(outer.parameters(), lr=0.1)
        for _ in range(STEPS):
            outer(torch.randn(4, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def closure_job(rank: int, world: int, out: str) -> dict[str, int]:
    """DDP trained as Lightning does (forward and backward inside the closure given to
    ``optimizer.step``), a validation after each step with metrics all-reduced
    (``sync_dist``: more of them as it goes), and a validation after the last step."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile

    with commlens.capture(out):
        dist.init_process_group("gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            model = DDP(Net())
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            torch.manual_seed(rank)
            for step in range(STEPS):

                def closure() -> torch.Tensor:
                    opt.zero_grad()
                    loss = model(torch.randn(8, 16)).square().mean()
                    loss.backward()
                    return loss

                opt.step(closure)
                _validate(model, metrics=step + 1)
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return seen


def _validate(model: nn.Module, metrics: int) -> None:
    with torch.no_grad():
        out = model(torch.randn(4, 16))
    for _ in range(metrics):  # self.log(..., sync_dist=True), one per metric
        dist.all_reduce(out.mean().reshape(1))
