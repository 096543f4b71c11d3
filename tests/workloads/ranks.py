"""Run a function on N gloo ranks (spawned processes) and gather results or failures."""

from __future__ import annotations

import os
import pickle
import queue
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(
    rank: int, nproc: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...], results: Any
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=nproc)
        out = fn(*args)
        results.put((rank, True, pickle.dumps(out)))  # a copy: plain pickle, not shared memory
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn: Callable[..., Any], nproc: int, *args: Any, timeout_s: float = 120) -> list[Any]:
    """``fn(*args)`` on ``nproc`` ranks; results in rank order. A rank's exception
    fails the caller with that rank's traceback."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(r, nproc, port, fn, args, results), daemon=True)
        for r in range(nproc)
    ]
    for p in procs:
        p.start()
    gathered: dict[int, Any] = {}
    try:
        while len(gathered) < nproc:
            try:
                rank, ok, out = results.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"ranks timed out after {timeout_s} s") from None
            if not ok:
                raise AssertionError(f"rank {rank} failed:\n{out}")
            gathered[rank] = pickle.loads(out)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    return [gathered[r] for r in range(nproc)]
