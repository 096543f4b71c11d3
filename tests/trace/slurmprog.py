"""A rank program as ``srun`` starts it, one task per rank: the rank comes from SLURM_*.

The test sets the Slurm variables (no Slurm needed) and MASTER_ADDR/MASTER_PORT.
"""

import os

import torch
import torch.distributed as dist

if __name__ == "__main__":
    os.environ.update(
        RANK=os.environ["SLURM_PROCID"],
        WORLD_SIZE=os.environ["SLURM_NTASKS"],
        LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"),
    )
    dist.init_process_group("gloo")
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    dist.destroy_process_group()
