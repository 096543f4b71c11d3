"""Run a function on N real ranks (gloo, spawned processes) and gather results,
and read back what a capture of them recorded."""

from __future__ import annotations

import os
import queue
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

import commlens
from commlens.launch import free_port


def _entry(
    fn: Callable[..., Any], rank: int, world: int, port: int, out: Any, args: tuple[Any, ...]
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    try:
        out.put((rank, True, fn(rank, world, *args)))
    except BaseException:
        out.put((rank, False, traceback.format_exc()))


def run_ranks(fn: Callable[..., Any], world: int, *args: Any, timeout: float = 180) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` processes; results in rank order.

    The function must be importable (module level). A failure on any rank
    raises with that rank's traceback.
    """
    ctx = mp.get_context("spawn")
    results: Any = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(fn, r, world, port, results, args)) for r in range(world)
    ]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    errors: list[str] = []
    try:
        for _ in range(world):
            try:
                rank, ok, value = results.get(timeout=timeout)
            except queue.Empty:
                errors.append(f"timed out after {timeout}s waiting for ranks")
                break
            if ok:
                got[rank] = value
            else:
                errors.append(f"rank {rank} failed:\n{value}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise AssertionError("\n".join(errors))
    return [got[r] for r in range(world)]


def event_rows(run_dir: Any, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` over the ``events`` of the run in ``run_dir``."""
    return list(commlens.load_run(run_dir, quiet=True).duckdb().execute(sql).fetchall())
