"""A tiny gloo job that injects one fault: ``python faultprog.py FAULT`` under a launcher.

Faults: skip (rank 1 skips the 4th all_reduce, then idles), size (rank 2 of 3 calls
the 3rd all_reduce with another size), order (ranks 0 and 1 issue all_reduces on two
groups in opposite order), p2p (both ranks receive first), straggler (rank 1 sleeps 3x
the step's compute every step), kill (rank 1 SIGKILLs itself at step 3), gil (rank 1
spins in a Python loop from step 3), dtype (rank 1 calls the 3rd all_reduce on int32
where rank 0 calls it on float32, as many bytes: both complete; the job ends), none (a
healthy job). Every rank ends by idling
until killed, except in the healthy, straggler and kill jobs.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import commlens

FAULT = sys.argv[1]
STEP_S = 0.02
STEPS = 8


def spin() -> None:
    x = 0
    while True:  # holds the interpreter lock, never calls into C for long
        x += 1


def main() -> None:
    # gloo's own timeout well above the tests' hang timeouts, below their limits
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    t = torch.ones(4)
    if FAULT == "order":
        g1 = dist.new_group([0, 1])
        g2 = dist.new_group([0, 1])
        dist.all_reduce(t)
        first, second = (g1, g2) if rank == 0 else (g2, g1)
        dist.all_reduce(t, group=first)
        dist.all_reduce(t, group=second)
    elif FAULT == "p2p":
        dist.all_reduce(t)
        dist.recv(t, src=1 - rank)
        dist.send(t, dst=1 - rank)
    else:
        for step in range(STEPS):
            if FAULT == "kill" and rank == 1 and step == 3:
                time.sleep(2.5)  # its ops so far reach the disk first
                os.kill(os.getpid(), signal.SIGKILL)
            if FAULT == "gil" and rank == 1 and step == 3:
                spin()
            time.sleep(STEP_S * (3 if FAULT == "straggler" and rank == 1 else 1))
            x = torch.ones(5 if FAULT == "size" and rank == 2 and step == 2 else 4)
            if FAULT == "dtype" and rank == 1 and step == 2:
                dist.all_reduce(torch.ones(4, dtype=torch.int32))  # the odd call
            elif not (FAULT == "skip" and rank == 1 and step == 3):
                dist.all_reduce(x)  # the usual call
            commlens.step()
    if FAULT in ("none", "straggler", "dtype"):
        dist.destroy_process_group()
        return
    time.sleep(120)  # a rank that finished waits here, as if in its next computation


if __name__ == "__main__":
    main()
