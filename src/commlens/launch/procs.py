"""Spawn N rank processes with the torchrun environment and supervise them.

The launcher sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR and MASTER_PORT for each rank, and OMP_NUM_THREADS=1 where the
caller's environment has none and several ranks share this machine (as torchrun
does: each rank's intra-op threads would otherwise take every core). It stops
the ranks on SIGINT/SIGTERM and the remaining ranks when one fails (naming the
one that failed first), and ranks die with the launcher even when it is
SIGKILLed, so a job never leaves orphans (see :mod:`commlens.launch.signals`).
A placement hook lets an emulated cluster run each rank inside its node's
network namespace (``ip netns exec ...``) with that node's address.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from commlens.launch.signals import (
    StopRequests,
    describe_exit,
    die_with_parent,
    shell_code,
    signal_group,
    signal_name,
)


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank runs: its node, the command prefix and the extra env."""

    node: int = 0
    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchResult:
    """Exit codes of every rank, in rank order (negative: killed by signal).

    ``first_failed`` is the rank that failed first, before the launcher
    stopped the others; ``stop_signal`` the SIGINT/SIGTERM that stopped the
    launcher itself (then ``interrupted`` is true).
    """

    exit_codes: list[int]
    interrupted: bool = False
    first_failed: int | None = None
    stop_signal: int | None = None

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(code == 0 for code in self.exit_codes)

    @property
    def exit_code(self) -> int:
        """What a shell would report: the first failed rank's code, 128 + N for signal N."""
        if self.interrupted:
            return 128 + (self.stop_signal or signal.SIGINT)
        if self.first_failed is not None:
            return shell_code(self.exit_codes[self.first_failed])
        for code in self.exit_codes:
            if code != 0:
                return shell_code(code)
        return 0

    def failure(self) -> str:
        """Why the launch failed, in words: ``"rank 1 was killed by SIGKILL"``."""
        if self.interrupted:
            if self.stop_signal is None or self.stop_signal == signal.SIGINT:
                return "interrupted"
            return f"stopped by {signal_name(self.stop_signal)}"
        failed = self.first_failed
        if failed is None:
            failed = next((r for r, c in enumerate(self.exit_codes) if c != 0), None)
        if failed is None:
            return "no rank failed"
        return f"rank {failed} {describe_exit(self.exit_codes[failed])}"


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
    rank runs here. When a rank exits non-zero, or this process gets SIGINT or
    SIGTERM, the ranks get SIGTERM, then SIGKILL after ``grace_s`` (at once
    on a second signal). Each rank leads its own session and is SIGKILLed by
    the kernel if this process dies first. Call it from the thread that lives
    until it returns (the parent-death signal follows the starting thread).
    """
    if nproc < 1:
        raise ValueError("nproc must be at least 1")
    if nodes < 1 or nproc % nodes:
        raise ValueError(f"nproc ({nproc}) must be a multiple of nodes ({nodes})")
    per_node = nproc // nodes
    port = master_port or free_port()
    base = dict(os.environ if env is None else env)
    if nproc > 1:
        base.setdefault("OMP_NUM_THREADS", "1")
    procs: list[subprocess.Popen[bytes]] = []
    stop = StopRequests()
    with stop.installed():
        try:
            for rank in range(nproc):
                if stop.count:  # stopped while starting: start no more
                    break
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
                procs.append(
                    subprocess.Popen(
                        [*place.prefix, *argv],
                        env=rank_env,
                        start_new_session=True,
                        preexec_fn=die_with_parent(signal.SIGKILL),
                    )
                )
            if on_started is not None and not stop.count:
                on_started(procs)
            return _supervise(procs, grace_s, stop)
        finally:
            for proc in procs:  # an error in here: no rank outlives the launcher
                if proc.poll() is None:
                    _signal_rank(proc, signal.SIGKILL)
                    proc.wait()


def _signal_rank(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to a live rank and whatever it started in its session."""
    if proc.poll() is None:
        signal_group(proc.pid, sig)


def _waiter(proc: subprocess.Popen[bytes], rank: int, exits: queue.SimpleQueue[int]) -> None:
    proc.wait()
    exits.put(rank)


def _supervise(
    procs: list[subprocess.Popen[bytes]], grace_s: float, stop: StopRequests
) -> LaunchResult:
    # One waiter thread per rank reports each exit as it happens, so the
    # order of the queue is the order the ranks died in: the first failure is
    # known before the launcher's own SIGTERM makes the others fail too.
    exits: queue.SimpleQueue[int] = queue.SimpleQueue()
    for rank, proc in enumerate(procs):
        threading.Thread(target=_waiter, args=(proc, rank, exits), daemon=True).start()
    first_failed: int | None = None
    stopping_since: float | None = None
    killed = False
    running = len(procs)
    while running:
        try:
            rank = exits.get(timeout=0.05)
        except queue.Empty:
            pass
        else:
            running -= 1
            code = procs[rank].returncode
            if code != 0 and first_failed is None and stopping_since is None:
                first_failed = rank
        if stopping_since is None and (first_failed is not None or stop.count):
            stopping_since = time.monotonic()
            for proc in procs:
                _signal_rank(proc, signal.SIGTERM)
        overdue = stopping_since is not None and time.monotonic() - stopping_since > grace_s
        if not killed and (stop.count > 1 or overdue):
            killed = True
            for proc in procs:
                _signal_rank(proc, signal.SIGKILL)
    if stopping_since is not None:  # what the ranks started goes with them
        for proc in procs:
            signal_group(proc.pid, signal.SIGKILL)
    return LaunchResult(
        [int(proc.returncode) for proc in procs],
        interrupted=stop.count > 0,
        first_failed=first_failed,
        stop_signal=stop.first,
    )


def python_argv(module: str, *args: str) -> list[str]:
    """``[sys.executable, "-m", module, *args]``: run a module in this Python."""
    return [sys.executable, "-m", module, *args]
