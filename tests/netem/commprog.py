"""A plain torch.distributed script for ``commlens trace`` on emulated nodes."""

from __future__ import annotations

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
mib = 1 << 20
for _ in range(4):
    dist.all_reduce(torch.ones(8 * mib // 4))
for _ in range(2):
    dist.broadcast(torch.ones(4 * mib // 4), src=0)
    out = torch.zeros(8 * mib // 4)
    dist.all_gather_into_tensor(out, torch.ones(4 * mib // 4))
if rank == 0:
    dist.send(torch.ones(4 * mib // 4), dst=1)
elif rank == 1:
    dist.recv(torch.zeros(4 * mib // 4), src=0)
dist.barrier()
dist.destroy_process_group()
