"""A job that hangs: rank 1 skips the 4th all-reduce, then goes on computing.

    commlens trace --out runs/hang --nproc 2 --hang-timeout 5 --kill-on-hang -- \
        python examples/hang.py
    commlens doctor runs/hang
"""

import time

import torch
import torch.distributed as dist

import commlens


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(1024)
    for step in range(6):
        time.sleep(0.05)  # the step's computation
        if not (rank == 1 and step == 3):  # the bug: rank 1 skips this step's all-reduce
            dist.all_reduce(grad)  # the gradient sync every rank must join
        commlens.step()
    while True:  # rank 1 finished early and keeps computing: rank 0 waits forever
        time.sleep(1)


if __name__ == "__main__":
    main()
