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
    rank: int, world: int, out: str, stage: int, hpz: int = 1
) -> tuple[dict[str, int], dict[str, tuple[str, list[int]]]]:
    """(torch.profiler's c10d calls per op, the groups DeepSpeed holds by name) of a
    ZeRO-``stage`` job whose parameters have ``hpz`` ranks per secondary partition."""
    os.environ.setdefault("LOCAL_RANK", str(rank))
    import deepspeed
    from torch.profiler import ProfilerActivity, profile

    config = {
        "train_batch_size": 8 * world,
        "train_micro_batch_size_per_gpu": 8,
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
            for _ in range(STEPS):
                loss = engine(torch.randn(8, 32)).square().mean()
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
