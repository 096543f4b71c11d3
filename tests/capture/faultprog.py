"""A small DDP job for fault tests: ``python faultprog.py OUT MODE``.

MODE ``plain`` runs untraced, ``traced`` traces into OUT. Rank 0 prints a
digest of the final parameters.
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import commlens


def train(rank: int) -> str:
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)
    for _ in range(6):
        model(torch.randn(8, 32)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    # Free DDP's reducer (it holds the process group) while the group is whole:
    # torch's gloo group, torn down at interpreter exit instead, sometimes aborts.
    del model, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


def worker(rank: int, out: str, mode: str) -> None:
    if mode == "plain":
        digest = train(rank)
    else:
        with commlens.capture(out, flush_events=1):
            digest = train(rank)
    if rank == 0:
        print(f"digest {digest}", flush=True)


if __name__ == "__main__":
    out_dir, run_mode = sys.argv[1], sys.argv[2]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3])
    mp.spawn(worker, args=(out_dir, run_mode), nprocs=2, join=True)
