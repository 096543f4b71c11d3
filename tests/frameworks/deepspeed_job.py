"""A DeepSpeed ZeRO job on gloo (CPU): a tiny model, a torch optimizer, no annotation."""

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


def job(rank: int, world: int, out: str, stage: int) -> dict[str, int]:
    os.environ.setdefault("LOCAL_RANK", str(rank))
    import deepspeed
    from torch.profiler import ProfilerActivity, profile

    config = {
        "train_batch_size": 8 * world,
        "train_micro_batch_size_per_gpu": 8,
        "zero_optimization": {"stage": stage},
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
        torch.distributed.destroy_process_group()
    return seen
