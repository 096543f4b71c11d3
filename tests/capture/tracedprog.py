"""An unmodified distributed script: it knows nothing of commlens.

Run under torchrun (reads the rank from the environment) or directly with
``spawn`` as its first argument, when it starts its own two ranks.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank: int = -1, world: int = -1) -> None:
    if rank >= 0:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo")
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["spawn"]:
        os.environ.update(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2] if len(sys.argv) > 2 else "29611"
        )
        mp.spawn(main, args=(2,), nprocs=2)
    else:
        main()
