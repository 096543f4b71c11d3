"""A rank or a job that waits to be stopped: ``python sleepprog.py DIR MODE ...``.

Every process writes its pid to ``DIR/pid-<RANK or MODE>-<pid>`` and sleeps.
MODE ``sleep`` just does that; ``ignore-term`` ignores SIGTERM first;
``spawn N [MODE]`` starts N children of this program in MODE (default
``child``) and waits for them, as a wrapper script that starts its own ranks
does; ``rank1-dies``: rank 1 SIGKILLs itself once rank 0 runs, and rank 0
ignores SIGTERM. No torch: it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def mark(out: Path, who: str) -> None:
    (out / f"pid-{who}-{os.getpid()}").write_text(str(os.getpid()))


def main(argv: list[str]) -> None:
    out, mode = Path(argv[0]), argv[1]
    if mode == "spawn":
        child_mode = argv[3] if len(argv) > 3 else "child"
        kids = [
            subprocess.Popen([sys.executable, __file__, str(out), child_mode])
            for _ in range(int(argv[2]))
        ]
        mark(out, "job")
        for kid in kids:
            kid.wait()
        return
    rank = os.environ.get("RANK", mode)
    if mode == "rank1-dies" and rank == "1":
        while not any(out.glob("pid-0-*")):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode in ("ignore-term", "rank1-dies"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mark(out, rank)
    time.sleep(120)


if __name__ == "__main__":
    main(sys.argv[1:])
