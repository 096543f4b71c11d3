"""Capture from inside a script: ``with commlens.capture(dir)``.

python examples/capture_in_script.py runs/inline
commlens report runs/inline
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import commlens


def worker(rank: int, world: int, out: str) -> None:
    with commlens.capture(out):
        dist.init_process_group("gloo", rank=rank, world_size=world)
        grads = torch.randn(1 << 20)
        for _ in range(3):
            work = dist.all_reduce(grads, async_op=True)  # overlapped with compute
            torch.randn(256, 256) @ torch.randn(256, 256)
            work.wait()
            commlens.step()  # no optimizer here: mark the step ourselves
        dist.destroy_process_group()


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/inline"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29513")
    mp.spawn(worker, args=(2, out_dir), nprocs=2)
    print(commlens.load_run(out_dir).events.num_rows, "events in", out_dir)
