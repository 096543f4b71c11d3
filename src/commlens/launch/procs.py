"""Spawn N rank processes with the torchrun environment and supervise them.

The launcher sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR and MASTER_PORT for each rank, forwards SIGINT/SIGTERM, and stops
the remaining ranks when one fails, so a crashed job never leaves orphans.
A placement hook lets an emulated cluster run each rank inside its node's
network namespace (``ip netns exec ...``) with that node's address.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank runs: its node, the command prefix and the extra env."""

    node: int = 0
    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchResult:
    """Exit codes of every rank, in rank order (negative: killed by signal)."""

    exit_codes: list[int]
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(code == 0 for code in self.exit_codes)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        for code in self.exit_codes:
            if code != 0:
                return code if code > 0 else 128 - code
        return 0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def launch_ranks(
    argv: Sequence[str],
    nproc: int,
    *,
    nodes: int = 1,
    env: dict[str, str] | None = None,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    placement: Callable[[int, int], RankPlacement] | None = None,
    grace_s: float = 5.0,
    on_started: Callable[[list[subprocess.Popen[bytes]]], None] | None = None,
) -> LaunchResult:
    """Run ``argv`` as ``nproc`` ranks spread evenly over ``nodes`` and wait.

    ``placement(rank, node)`` may put a rank in a namespace; by default every
    rank runs here. When a rank exits non-zero, the others get SIGTERM, then
    SIGKILL after ``grace_s``.
    """
    if nproc < 1:
        raise ValueError("nproc must be at least 1")
    if nodes < 1 or nproc % nodes:
        raise ValueError(f"nproc ({nproc}) must be a multiple of nodes ({nodes})")
    per_node = nproc // nodes
    port = master_port or free_port()
    base = dict(os.environ if env is None else env)
    procs: list[subprocess.Popen[bytes]] = []
    for rank in range(nproc):
        node = rank // per_node
        place = placement(rank, node) if placement else RankPlacement(node=node)
        rank_env = dict(base)
        rank_env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank % per_node),
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(per_node),
            GROUP_RANK=str(node),
            NODE_RANK=str(node),
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(port),
            TORCHELASTIC_RUN_ID="commlens",
        )
        rank_env.update(place.env)
        procs.append(subprocess.Popen([*place.prefix, *argv], env=rank_env))
    if on_started is not None:
        on_started(procs)
    return _supervise(procs, grace_s)


def _supervise(procs: list[subprocess.Popen[bytes]], grace_s: float) -> LaunchResult:
    interrupted = False
    previous = {}

    def _forward(signum: int, _frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, _forward)
        except ValueError:  # not the main thread: signals stay as they are
            pass
    try:
        failed_at: float | None = None
        while True:
            codes = [proc.poll() for proc in procs]
            if all(code is not None for code in codes):
                break
            if failed_at is None and any(code not in (None, 0) for code in codes):
                failed_at = time.monotonic()
                for proc in procs:
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGTERM)
            if failed_at is not None and time.monotonic() - failed_at > grace_s:
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
            if interrupted and failed_at is None:
                failed_at = time.monotonic()
            time.sleep(0.02)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return LaunchResult([int(proc.returncode) for proc in procs], interrupted=interrupted)


def python_argv(module: str, *args: str) -> list[str]:
    """``[sys.executable, "-m", module, *args]``: run a module in this Python."""
    return [sys.executable, "-m", module, *args]
