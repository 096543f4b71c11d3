"""The end-of-run rendezvous (capture/clock.py ``all_ready``) with a peer that died."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
from typing import Any

from commlens.launch import free_port

LIMIT_S = 10.0


def _rank(rank: int, port: int, out: Any) -> None:
    import torch.distributed as dist

    from commlens.capture.clock import all_ready, register_process

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    register_process()
    if rank == 1:
        time.sleep(2.0)  # a slow peer, alive: waited for (ten polls and more)
    t0 = time.monotonic()
    slow = all_ready("slow", LIMIT_S)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t1 = time.monotonic()
    dead = all_ready("dead", LIMIT_S)
    out.put((slow, t1 - t0, dead, time.monotonic() - t1))


def test_a_slow_peer_is_waited_for_and_a_dead_one_noticed_at_once() -> None:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        slow, slow_s, dead, dead_s = out.get(timeout=120)
    except queue.Empty:
        raise AssertionError("rank 0 never reported") from None
    finally:
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
    assert slow, slow_s  # rank 1 arrived seconds late: waited for, not taken for dead
    # rank 1 is gone: the wait ends within a few polls, not at the 10 s timeout
    assert dead is False and dead_s < 3.0, dead_s
    assert procs[1].exitcode == -signal.SIGKILL
