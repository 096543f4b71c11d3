"""torchtitan-style jobs from torch's own APIs (gloo, CPU): a named device mesh,
tensor + sequence parallel with the weights broadcast before training and a
loss metric all-reduced after the step; FSDP2 with each batch's token count
all-reduced before its forward and the loss all-reduced before backward; and
a 1F1B pipelining schedule. No annotation."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.frameworks.observe import profiled_ops

STEPS = 3
MICROBATCHES = 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.w1 = nn.Linear(32, 64)
        self.w2 = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.relu(self.w1(self.norm(x))))


def tp_sp_job(rank: int, world: int, out: str) -> dict[str, int]:
    """``parallelize_module`` with sequence parallel on a ("tp",) mesh; a loss metric."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    from torch.profiler import ProfilerActivity, profile

    warnings.simplefilter("ignore")
    with commlens.capture(out, align_clocks=False):
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(rank)
            model = Block()
            for p in model.parameters():  # one set of initial weights: set-up
                dist.broadcast(p.data, src=0)
            plan = {
                "norm": SequenceParallel(),
                "w1": ColwiseParallel(input_layouts=Shard(1)),
                "w2": RowwiseParallel(output_layouts=Shard(1)),
            }
            parallelize_module(model, mesh, plan)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            torch.manual_seed(rank)
            for _ in range(STEPS):
                loss = model(torch.randn(2, 4, 32)).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                funcol.all_reduce(loss.detach(), "avg", mesh).wait()  # the logged loss
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return seen


def pipeline_job(rank: int, world: int, out: str) -> dict[str, int]:
    """Two stages under ``Schedule1F1B``, an optimizer step per schedule step."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    from torch.profiler import ProfilerActivity, profile

    warnings.simplefilter("ignore")
    with commlens.capture(out, align_clocks=False):
        dist.init_process_group("gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            stages = [Block() for _ in range(world)]
            stage = PipelineStage(stages[rank], rank, world, torch.device("cpu"))
            schedule = Schedule1F1B(
                stage, n_microbatches=MICROBATCHES, loss_fn=lambda y, t: (y - t).square().mean()
            )
            opt = torch.optim.SGD(stages[rank].parameters(), lr=0.1)
            for _ in range(STEPS):
                if rank == 0:
                    schedule.step(torch.randn(8, 32))
                else:
                    schedule.step(target=torch.zeros(8, 32))
                opt.step()
                opt.zero_grad()
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return seen


def fsdp_job(rank: int, world: int, out: str) -> None:
    """FSDP2 over a ("dp",) mesh, torchtitan's way: each batch's token count all-reduced
    before its forward (after the previous optimizer step), the loss before backward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    warnings.simplefilter("ignore")
    with commlens.capture(out, align_clocks=False):
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        torch.manual_seed(0)
        model = nn.Sequential(Block(), Block())
        for block in model:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(rank)
        for _ in range(STEPS):
            x = torch.randn(4, 8, 32)
            tokens = torch.tensor([x.shape[0] * x.shape[1]])
            dist.all_reduce(tokens, group=mesh.get_group())  # the global token count
            loss = model(x).square().sum() / tokens
            dist.all_reduce(loss.detach().clone(), group=mesh.get_group())  # the logged loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
