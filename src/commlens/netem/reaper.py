"""Removes an emulated run when its owner dies without cleaning up (e.g. SIGKILL).

Started by :class:`~commlens.netem.cluster.EmulatedCluster` in its own session
with a pipe on stdin; when the pipe closes (owner exited, however it exited),
it removes what the run's record still lists and exits. An owner that tore
down cleanly has already deleted the record, and then there is nothing to do.
"""

from __future__ import annotations

import signal
import sys

from commlens.netem import iproute
from commlens.netem.state import load_record
from commlens.netem.teardown import remove_recorded


def main(argv: list[str]) -> int:
    (run_id,) = argv
    if not iproute.ID_RE_COMPILED.fullmatch(run_id):
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    record = load_record(run_id)
    if record is not None:
        remove_recorded(record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
