"""A job still training when another command looks at its run: ``python stepprog.py DIR``.

Each rank (RANK, WORLD_SIZE, MASTER_* from its launcher) runs all-reduce
steps; once every rank has done one, rank 0 writes ``DIR/ready``; the ranks
go on until ``DIR/stop`` exists, then take two more steps and end.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main(signals: Path) -> None:
    dist.init_process_group("gloo")
    t = torch.ones(256)
    step = 0
    while True:
        dist.all_reduce(t)
        stop = torch.tensor([float((signals / "stop").exists())])
        dist.all_reduce(stop)  # every rank stops at the same step
        step += 1
        if step == 1 and dist.get_rank() == 0:
            (signals / "ready").write_text("1")
        if stop.item() > 0:
            break
        time.sleep(0.05)
    for _ in range(2):
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
