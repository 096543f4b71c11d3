"""Ranks that leave with async ops still in flight: ``python exitprog.py OUT HOW``.

HOW ``with`` leaves a ``with commlens.capture`` block, ``started`` never stops a
capture begun with ``start()``, ``plain`` runs untraced, ``sigterm`` lets all
50 complete unwaited, then is stopped by SIGTERM inside the capture. No rank
destroys its process group. Run under ``commlens.launch.launch_ranks`` (2 ranks).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import commlens


def issue() -> None:
    dist.init_process_group("gloo")
    t = torch.ones(100_000)
    works = [dist.all_reduce(t, async_op=True) for _ in range(50)]
    works[0].wait()  # the other 49 are still in flight when the rank leaves


def main(out: str, how: str) -> None:
    if how == "with":
        with commlens.capture(out):
            issue()
    elif how == "sigterm":
        with commlens.capture(out):
            dist.init_process_group("gloo")
            t = torch.ones(1000)
            works = [dist.all_reduce(t, async_op=True) for _ in range(50)]
            works[-1].get_future().wait()  # complete, and never waited on by Work.wait
            time.sleep(0.5)  # their completion callbacks have run
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # not reached: the signal ends the rank
    elif how == "started":
        commlens.capture(out).start()
        issue()
    else:
        issue()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
