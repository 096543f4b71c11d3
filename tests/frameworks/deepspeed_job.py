"""A DeepSpeed ZeRO job on gloo (CPU): a tiny model, a torch optimizer, no annotation
(ZeRO++ hpZ too: ``zero_hpz_partition_size``)."""

from __future__ import annotations

import os

import torch
from torch import nn

import commlens
from tests.frameworks.observe import profiled_ops

STEPS = 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def job(
    rank: int, world: int, out: str, stage: int, hpz: int = 1, gas: int = 1, steps: int = STEPS
) -> tuple[dict[str, int], dict[str, tuple[str, list[int]]]]:
    """(torch.profiler's c10d calls per op, the groups DeepSpeed holds by name) of a
    ZeRO-``stage`` job whose parameters have ``hpz`` ranks per secondary partition:
    ``steps`` optimizer steps of ``gas`` micro-batches each, ``engine.step()`` after
    every micro-batch, the loss all-reduced (a logged metric) before each backward."""
    os.environ.setdefault("LOCAL_RANK", str(rank))
    import deepspeed
    from torch.profiler import ProfilerActivity, profile

    config = {
        "train_batch_size": 8 * world * gas,
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": gas,
        "zero_optimization": {"stage": stage, "zero_hpz_partition_size": hpz},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    with commlens.capture(out):
        deepspeed.init_distributed(dist_backend="gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
            torch.manual_seed(rank)
            for _ in range(steps * gas):
                loss = engine(torch.randn(8, 32)).square().mean()
                torch.distributed.all_reduce(loss.detach().clone())  # the logged loss
                engine.backward(loss)
                engine.step()
        seen = profiled_ops(prof)
        groups = _groups()
        torch.distributed.destroy_process_group()
    return seen, groups


def _groups() -> dict[str, tuple[str, list[int]]]:
    """The default group and those ``deepspeed.utils.groups`` holds (its world clone,
    data-parallel and hpZ secondary-partition groups): what holds each -> (name, members)."""
    import torch.distributed as dist
    from deepspeed.utils import groups

    held = {"default": dist.group.WORLD}
    held.update({name: getattr(groups, name, None) for name in GROUP_NAMES})
    return {
        k: (g.group_name, dist.get_process_group_ranks(g)) for k, g in held.items() if g is not None
    }


GROUP_NAMES = ("_WORLD_GROUP", "_DATA_PARALLEL_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP")


def pipe_job(rank: int, world: int, out: str) -> tuple[dict[str, int], dict[str, str]]:
    """(torch.profiler's c10d calls per op, the pipeline grid's groups by axis -> name) of
    a two-stage DeepSpeed PipelineEngine job over ``world`` ranks (``world // 2`` data
    parallel replicas), trained with ``train_batch``."""
    os.environ.setdefault("LOCAL_RANK", str(rank))
    import deepspeed
    from deepspeed.pipe import PipelineModule
    from torch.profiler import ProfilerActivity, profile

    config = {
        "train_batch_size": 2 * 2 * (world // 2),  # 2 micro-batches of 2 per replica
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 10**9,
        "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
    }
    with commlens.capture(out):
        deepspeed.init_distributed(dist_backend="gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            layers = [nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16), nn.Linear(16, 4)]
            model = PipelineModule(
                layers=layers, num_stages=2, loss_fn=lambda y, t: (y - t).square().mean()
            )
            engine, *_ = deepspeed.initialize(
                model=model, model_parameters=list(model.parameters()), config=config
            )
            torch.manual_seed(rank)
            data = iter([(torch.randn(2, 16), torch.randn(2, 4)) for _ in range(4 * STEPS)])
            for _ in range(STEPS):
                engine.train_batch(data)
        seen = profiled_ops(prof)
        grid = engine.grid
        groups = {
            axis: getattr(grid, attr).group_name
            for axis, attr in (("pp", "pp_proc_group"), ("dp", "dp_proc_group"))
        }
        groups["world"] = torch.distributed.group.WORLD.group_name
        torch.distributed.destroy_process_group()
    return seen, groups
