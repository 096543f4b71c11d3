"""A rank SIGKILLed well after its last ops: ``killprog.py OUT FLUSH_S QUIET_S HOW [DISK_S]``.

Run under :func:`commlens.launch.launch_ranks` with 2 ranks. Each rank traces
with ``flush_seconds=FLUSH_S`` and records :data:`OPS` ops: DDP's broadcast
of the parameters, three DDP steps with one blocking all-reduce each, then a
fourth backward without an optimizer step (its bucket all-reduce, read later,
completes and is not written by the recording thread) and five async
all-reduces that complete and are never waited on. Those six sit in the
recorder; only the writer thread can write them. Each rank then writes
``OUT/marker-R.json`` (when, how many ops, how many steps) and spends QUIET_S
seconds: HOW ``quiet`` sleeps, HOW ``busy`` keeps issuing blocking
all-reduces. Then rank 1 writes ``OUT/kill-1.json`` (when) and SIGKILLs
itself; rank 0 sleeps until the launcher stops it. With DISK_S every fsync
first waits DISK_S seconds, as on a loaded disk.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import commlens

STEPS = 3
# DDP's broadcast and its C++ wrap-time checks (an all_gather, a broadcast); per step a
# bucket and a blocking all-reduce, and the bucket rebuild's two C++ broadcasts at the
# second step; one more bucket; five async.
OPS = 1 + 2 + STEPS * 2 + 2 + 1 + 5


def _record(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def slowed(fsync: Callable[[int], None], wait_s: float) -> Callable[[int], None]:
    """``fsync`` on a loaded disk: each call first waits ``wait_s`` seconds, holding no CPU."""

    def slow_fsync(fd: int) -> None:
        time.sleep(wait_s)
        fsync(fd)

    return slow_fsync


def main(out: Path, flush_s: float, quiet_s: float, how: str) -> None:
    with commlens.capture(out, flush_seconds=flush_s):
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(0)
        # Small enough for a single gradient bucket.
        model = DDP(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_sum = torch.zeros(1)
        for _ in range(STEPS):
            loss = model(torch.randn(4, 16)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            loss_sum.fill_(loss.item())
            dist.all_reduce(loss_sum)
        model(torch.randn(4, 16)).square().mean().backward()  # no optimizer step after it
        t = torch.ones(8)
        works = [dist.all_reduce(t, async_op=True) for _ in range(5)]
        works[-1].get_future().wait()  # complete, and never waited on by Work.wait
        time.sleep(0.05)  # their completion callbacks have run
        _record(out / f"marker-{rank}.json", {"t_ns": time.time_ns(), "ops": OPS, "steps": STEPS})
        if how == "busy":  # as many calls on both ranks: at least quiet_s of them
            for _ in range(int(quiet_s / 0.01)):
                dist.all_reduce(t)
                time.sleep(0.01)
        else:
            time.sleep(quiet_s)
        if rank == 1:
            _record(out / "kill-1.json", {"t_ns": time.time_ns()})
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)  # the launcher stops this rank once rank 1 is gone


if __name__ == "__main__":
    if len(sys.argv) > 5:
        os.fsync = slowed(os.fsync, float(sys.argv[5]))
    main(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
