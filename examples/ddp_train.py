"""A plain DDP training script that knows nothing of commlens.

torchrun --nproc_per_node 2 examples/ddp_train.py [STEPS]
commlens trace --out runs/ddp -- torchrun --nproc_per_node 2 examples/ddp_train.py
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(steps: int = 5) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(32, 256)
        loss = model(x).square().mean()
        loss.backward()  # DDP all-reduces gradient buckets during backward
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
