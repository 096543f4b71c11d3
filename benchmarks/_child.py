"""What the scale benchmarks measure of a command: run as a child, timed with ``wait4``.

The benchmarks import it as a sibling (``python benchmarks/X.py`` puts this
folder on the path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Usage:
    """What one child process took."""

    wall_s: float
    cpu_s: float
    """User + system time."""
    peak_rss_gib: float
    """Its peak resident set (``ru_maxrss``)."""
    rc: int

    def verdict(self, wall_s: float, rss_gib: float) -> str:
        """OK within the targets, else why not."""
        if self.rc:
            return f"FAILED rc={self.rc}"
        return "OK" if self.wall_s <= wall_s and self.peak_rss_gib <= rss_gib else "OVER TARGET"

    def to_dict(self) -> dict[str, float]:
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "peak_rss_GiB": self.peak_rss_gib,
            "rc": self.rc,
        }


def run_child(
    cmd: list[str], stdout: Path | None = None, env: dict[str, str] | None = None
) -> Usage:
    """Run ``cmd`` (in ``env``, else this process's environment), its stdout into
    ``stdout`` (else discarded); its stderr is shown when it fails."""
    with tempfile.TemporaryFile() as err:
        with (stdout or Path(os.devnull)).open("wb") as sink:
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=sink, stderr=err, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
        rc = os.waitstatus_to_exitcode(status)
        if rc:
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace"))
    return Usage(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, rc)
