"""A plain FSDP2 (``fully_shard``) training script that knows nothing of commlens.

torchrun --nproc_per_node 2 examples/fsdp2_train.py [STEPS]
commlens trace --out runs/fsdp2 --nproc 4 --nodes 2 --link 1gbit -- python examples/fsdp2_train.py
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main(steps: int = 5, width: int = 256, blocks: int = 4) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(width) for _ in range(blocks)])
    for block in model:
        fully_shard(block)  # each block's parameters gathered for its forward and backward
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(16, width)
        model(x).square().mean().backward()  # gradients reduce-scattered block by block
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
