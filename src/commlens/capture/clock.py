"""Aligning the ranks' clocks with rank 0's, at start and at end.

Each rank plays a few ping-pong rounds with rank 0 (rank r sends its time
t1, rank 0 answers with its time t2, rank r reads t3): the offset is
t2 − (t1 + t3)/2 from the round with the shortest round trip. Two such
measurements, at start and at end, give the drift; without drift beyond
their error the one with the shorter round trip is kept, and the other's
difference from it is the ``residual_ns``. The reader then maps a rank's time
t onto rank 0's clock as t + offset + drift·(t − t_ref).

Ranks running on rank 0's kernel (one host; emulated nodes in network
namespaces too) read the same clock: their offset is 0 and their drift 0,
whatever a ping-pong on a loaded host says (its round trips are kept).
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from commlens.capture.context import thread_state


def _device() -> torch.device:
    if "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def measure_offset(rounds: int = 6) -> tuple[int, int] | None:
    """(offset_ns, rtt_ns) of this rank relative to rank 0; None on failure.

    Every rank must call this at the same point. The traffic is not recorded.
    """
    if not dist.is_initialized():
        return None
    world = dist.get_world_size()
    rank = dist.get_rank()
    if world == 1:
        return (0, 0)
    if world > 256:
        rounds = 2
    device = _device()
    buf = torch.zeros(1, dtype=torch.int64, device=device)
    thread = thread_state()
    depth, thread.depth = thread.depth, 1  # keep the ping-pong out of the trace
    try:
        best: tuple[int, int] | None = None
        for peer in range(1, world):
            for i in range(rounds + 2):  # two warm-up rounds open the connection
                keep = i >= 2
                if rank == 0:
                    c10d.recv(buf, src=peer)
                    buf.fill_(time.time_ns())
                    c10d.send(buf, dst=peer)
                elif rank == peer:
                    t1 = time.time_ns()
                    buf.fill_(t1)
                    c10d.send(buf, dst=0)
                    c10d.recv(buf, src=0)
                    t3 = time.time_ns()
                    t2 = int(buf.item())
                    rtt = t3 - t1
                    if keep and (best is None or rtt < best[1]):
                        best = (t2 - (t1 + t3) // 2, rtt)
        return (0, 0) if rank == 0 else best
    finally:
        thread.depth = depth


_PROCESS_KEY = "commlens/process/{}"
POLL_S = 0.2
"""How often :func:`all_ready` looks whether a rank it waits for is still alive."""


def _process_id() -> str:
    """This process as another one on its kernel can look it up: clock (boot) id, pid
    namespace, pid."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{clock_id()} {namespace} {os.getpid()}"


def register_process() -> None:
    """Put this rank's process where the others' :func:`all_ready` can see it end (via
    the store; once, at the start). Never raises."""
    try:
        store: Any = c10d._get_default_store()
        store.set(_PROCESS_KEY.format(dist.get_rank()), _process_id())
    except Exception:
        pass


def _gone(store: Any, ranks: list[int]) -> bool:
    """Whether one of ``ranks`` registered a process on this kernel and pid namespace that
    no longer exists (a rank elsewhere, or unregistered, is not known to be gone)."""
    here = _process_id().rsplit(" ", 1)[0]
    for r in ranks:
        key = _PROCESS_KEY.format(r)
        if not store.check([key]):
            continue
        where, _, pid = store.get(key).decode().rpartition(" ")
        if where != here or not pid.isdigit():
            continue
        if not _alive(int(pid)):
            return True
    return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one that ended and is not yet reaped by its
    parent, a zombie, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    state = stat.rpartition(")")[2].split()[:1]
    return state not in (["Z"], ["X"])


def all_ready(tag: str, timeout_s: float = 10.0) -> bool:
    """True when every rank reached this point within ``timeout_s`` (via the store).

    False as soon as a rank still awaited is seen to have died (its process,
    registered by :func:`register_process`, gone from this host): a rank
    whose peer was killed does not wait out the timeout.
    """
    try:
        store: Any = c10d._get_default_store()
        world, rank = dist.get_world_size(), dist.get_rank()
        store.set(f"commlens/{tag}/{rank}", "1")
        keys = {r: f"commlens/{tag}/{r}" for r in range(world)}
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                store.wait(list(keys.values()), timedelta(seconds=max(0.001, min(POLL_S, left))))
                return True
            except Exception:
                if left <= POLL_S:
                    return False
            if _gone(store, [r for r, key in keys.items() if not store.check([key])]):
                return False
    except Exception:
        return False


def clock_id() -> str:
    """What names this process's clock: the kernel's boot id (the host name without one)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return socket.gethostname()


def shares_rank0_clock(timeout_s: float = 10.0) -> bool:
    """Whether this rank reads the same clock as rank 0 (via the store; every rank
    calls it at the same point). False when it cannot tell."""
    try:
        store: Any = c10d._get_default_store()
        key = "commlens/clock-id"
        if dist.get_rank() == 0:
            store.set(key, clock_id())
            return True
        store.wait([key], timedelta(seconds=timeout_s))
        return bool(store.get(key).decode() == clock_id())
    except Exception:
        return False


def clock_record(
    start: tuple[int, int] | None,
    t_start: int,
    end: tuple[int, int] | None,
    t_end: int,
    *,
    shared: bool = False,
) -> dict[str, Any]:
    """The manifest entry for one rank's clock (``shared``: rank 0's own clock)."""
    if start is None:
        return {}
    record: dict[str, Any] = {
        "offset_ns": 0 if shared else start[0],
        "rtt_ns": start[1],
        "t_ref_ns": t_start,
        "drift": 0.0,
    }
    if shared:
        record["shared"] = True
        record["measured_offset_ns"] = start[0]
    if end is not None and t_end > t_start:
        record["offset_end_ns"] = 0 if shared else end[0]
        record["rtt_end_ns"] = end[1]
        if shared:
            record["measured_offset_end_ns"] = end[0]
            return record
        # Each offset is known to ±rtt/2: a change within that is noise, not drift.
        if abs(end[0] - start[0]) > (start[1] + end[1]) / 2:
            record["drift"] = (end[0] - start[0]) / (t_end - t_start)
        else:  # no drift: the measurement with the shorter round trip is the better one
            best, other = (end, start) if end[1] < start[1] else (start, end)
            record["offset_ns"] = best[0]
            record["residual_ns"] = abs(other[0] - best[0])
    return record
