"""Run one command (a launcher such as torchrun) as a job that stops with us.

The command leads its own session and process group. SIGINT and SIGTERM
received here are forwarded to that whole group, as a terminal would deliver
them; after ``grace_s`` whatever is left of the group is SIGKILLed. If this
process dies without forwarding (SIGKILL), the command gets SIGTERM from the
kernel, which launchers like torchrun pass on to their workers.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from commlens.launch.signals import (
    StopRequests,
    die_with_parent,
    group_alive,
    shell_code,
    signal_group,
    signal_name,
)


@dataclass(frozen=True)
class JobResult:
    """How the command ended, and the signal that stopped us, if any."""

    returncode: int  # as Popen reports it: negative when killed by a signal
    stop_signal: int | None = None

    @property
    def exit_code(self) -> int:
        """The command's code as a shell reports it (128 + N for signal N)."""
        return shell_code(self.returncode)

    @property
    def signal(self) -> str | None:
        """Name of the signal that killed the command, ``None`` when it exited."""
        return signal_name(-self.returncode) if self.returncode < 0 else None

    def launcher_fields(self) -> dict[str, object]:
        """What the run manifest records of the command's end."""
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stopped_by": signal_name(self.stop_signal) if self.stop_signal else None,
        }


def run_job(
    argv: Sequence[str], *, env: dict[str, str] | None = None, grace_s: float = 30.0
) -> JobResult:
    """Run ``argv`` to its end; forward SIGINT/SIGTERM to its process group."""
    stop = StopRequests()
    with stop.installed():
        proc = subprocess.Popen(
            list(argv),
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
        pgid = proc.pid
        forwarded = 0
        stopping_since: float | None = None
        killed = False
        try:
            while True:
                try:
                    proc.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    pass
                while forwarded < stop.count:
                    forwarded += 1
                    stopping_since = stopping_since or time.monotonic()
                    signal_group(pgid, stop.last or signal.SIGTERM)
                done = proc.returncode is not None
                if stopping_since is not None and not killed:
                    if time.monotonic() - stopping_since > grace_s:
                        killed = True
                        signal_group(pgid, signal.SIGKILL)
                if done and (stopping_since is None or killed or not group_alive(pgid)):
                    break
                if done:  # the leader is gone, the rest of its group still stopping
                    time.sleep(0.05)
        finally:
            if proc.poll() is None:
                signal_group(pgid, signal.SIGKILL)
                proc.wait()
        if stopping_since is not None:  # stopped: nothing of the job runs on
            signal_group(pgid, signal.SIGKILL)
    return JobResult(int(proc.returncode), stop.first)
