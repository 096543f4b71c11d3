"""What a rank has in flight, kept on disk for the hang diagnosis, and its stacks on demand.

Each intercepted call notes itself on its thread's state while it runs
(:attr:`commlens.capture.context.ThreadState.inflight`: one tuple stored and
cleared, the only cost on the per-op path); async ops wait in the recorder's
pending table. The writer thread's checkpoint (every ``flush_seconds``) reads
both and, when they changed, rewrites ``inflight-NNNNN.json``
(:func:`write_inflight`): each op's group, op, sizes, dtype, peer, issue time
and call site (``file:line function`` of the calling frame, interned in the
rank's call-site table, :mod:`commlens.capture.callsites`); a call that raised
stays there with its error until the thread's next call. So a rank killed or
hung keeps its ops in flight as of its last checkpoint.

:class:`StackDumps` registers :mod:`faulthandler` on the run format's
:data:`commlens.trace.inflight.STACK_SIGNAL`: the
hang watchdog (in the launcher) sends it, and the rank's interpreter writes
every thread's Python stack into ``stacks-NNNNN.txt`` from the signal handler
itself, which works while a thread holds the interpreter lock.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from commlens.capture.context import STATES
from commlens.capture.ops import dtype_name
from commlens.safefile import open_own
from commlens.trace.inflight import INFLIGHT_FORMAT, STACK_SIGNAL
from commlens.trace.layout import inflight_path, stacks_path
from commlens.trace.manifest import write_json_atomic

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder


def _op_fields(rec: Recorder, call: Any) -> dict[str, Any]:
    op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = call
    info = rec.groups.info(group)
    return {
        "op": op,
        "pg_name": info.name,
        "pg_ranks": list(info.ranks),
        "role": info.role,
        "dtype": dtype_name(dtype),
        "count": int(count),
        "bytes_in": int(bytes_in),
        "bytes_out": int(bytes_out),
        "size_bytes": int(size),
        "peer": None if peer is None else int(peer),
        "is_async": bool(is_async),
    }


def snapshot(rec: Recorder) -> list[dict[str, Any]]:
    """The rank's ops in flight now: blocking calls on every thread, then async ops
    issued and not completed. Ops whose arguments are read later (DDP's buckets) are
    left out: reading them is for the recording threads."""
    ops: list[dict[str, Any]] = []
    for ident, state in list(STATES.items()):
        held = state.inflight
        if held is None:
            continue
        call, frame, t_issue = held[:3]
        error = held[3] if len(held) > 3 else ""
        try:
            ops.append(
                {**_op_fields(rec, call), "t_issue_ns": t_issue,
                 "site": rec.callsites.describe(frame), "thread": ident, "blocking": True,
                 "error": error}
            )  # fmt: skip
        except Exception:
            continue  # a group destroyed meanwhile: its op is gone too
    kinds = rec.writer.kinds() if rec.writer is not None else []
    for _, pending in list(rec.ops.table.values()):
        head = pending.head
        if head is None or pending.done or pending.t_end is not None or head[0] >= len(kinds):
            continue
        kind = kinds[head[0]]
        op, _api, pg_name, pg_ranks, _size, role, dtype = kind[:7]
        ops.append(
            {
                "op": op, "pg_name": pg_name, "pg_ranks": list(pg_ranks), "role": role,
                "dtype": dtype, "count": head[2], "bytes_in": head[3], "bytes_out": head[4],
                "size_bytes": head[5], "peer": None if head[6] < 0 else head[6],
                "is_async": True, "t_issue_ns": pending.t_issue, "site": "", "thread": 0,
                "blocking": False,
            }
        )  # fmt: skip
    ops.sort(key=lambda o: o["t_issue_ns"])
    return ops


def write_inflight(rec: Recorder, last: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """Rewrite the rank's ``inflight-NNNNN.json`` if its ops in flight or its count of
    events changed since ``last`` (what the previous call returned); returns the new key."""
    if rec.rank is None or rec.writer is None:
        return last
    ops = snapshot(rec)
    events = rec.writer.n_events
    key = (
        events,
        tuple((o["t_issue_ns"], o["op"], o["pg_name"], o["site"], o.get("error")) for o in ops),
    )
    if key == last:
        return last
    data = {
        "format": INFLIGHT_FORMAT,
        "rank": rec.rank,
        "pid": os.getpid(),
        "t_ns": time.time_ns(),
        "events": events,
        "ops": ops,
    }
    write_json_atomic(inflight_path(rec.run_dir, rec.rank), data, indent=None)
    return key


class StackDumps:
    """faulthandler on :data:`STACK_SIGNAL`, writing into the rank's stacks file."""

    def __init__(self) -> None:
        self.file: IO[str] | None = None
        self.path: Path | None = None

    def register(self, run_dir: Path, rank: int) -> None:
        """Only where the signal is the default's: a program's own handler is kept."""
        if self.file is not None or signal.getsignal(STACK_SIGNAL) is not signal.SIG_DFL:
            return
        path = stacks_path(run_dir, rank)
        try:
            fd = open_own(path)  # never through a link commlens did not make
        except OSError:
            return  # something else is there: no stacks rather than writing into it
        self.path = path
        self.file = os.fdopen(fd, "w")  # open while the rank lives
        faulthandler.register(STACK_SIGNAL, file=self.file, all_threads=True, chain=False)

    def unregister(self) -> None:
        """Stop; an empty stacks file (never asked for) is removed."""
        if self.file is None:
            return
        try:
            faulthandler.unregister(STACK_SIGNAL)
            self.file.close()
            if self.path is not None and self.path.stat().st_size == 0:
                self.path.unlink()
        except (OSError, ValueError):
            pass
        self.file = None
