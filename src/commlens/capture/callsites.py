"""Where each op was called, interned per rank and written beside its events.

The per-op path (:meth:`commlens.capture.recorder.Recorder.on_call` and
``on_deferred``) looks the calling frame's ``(code, line)`` up in
:attr:`CallSiteTable.ids` and appends ``(seq, site id)`` to
:attr:`CallSiteTable.log`: a dict lookup and a list append. A site seen for
the first time is named once (:meth:`CallSiteTable.new`). The writer thread's
checkpoint and the close append the new sites and records to the rank's files
(:mod:`commlens.trace.callsites`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import CodeType, FrameType

import numpy as np

from commlens.safefile import open_own
from commlens.trace.layout import callsites_paths


class CallSiteTable:
    """A rank's call sites so far and the (seq, site id) records not yet written."""

    def __init__(self) -> None:
        self.ids: dict[tuple[CodeType, int], int] = {}
        self.sites: list[tuple[str, int, str]] = []
        self.log: list[tuple[int, int]] = []
        self._written = 0  # sites on disk
        self._lock = threading.Lock()  # naming a new site; writing

    def new(self, key: tuple[CodeType, int]) -> int:
        """The id of a site not seen before (another thread may have just named it)."""
        with self._lock:
            sid = self.ids.get(key)
            if sid is None:
                code, line = key
                sid = len(self.sites)
                self.sites.append((code.co_filename, line, code.co_name))
                self.ids[key] = sid
        return sid

    def note(self, seq: int, frame: FrameType) -> None:
        """Keep ``frame``'s site as op ``seq``'s (the recorder's per-op path inlines this)."""
        key = (frame.f_code, frame.f_lineno)
        sid = self.ids.get(key)
        if sid is None:
            sid = self.new(key)
        self.log.append((seq, sid))

    def describe(self, frame: FrameType | None) -> str:
        """``file:line function`` of ``frame``'s site, interned in this table ('' for none)."""
        if frame is None:
            return ""
        key = (frame.f_code, frame.f_lineno)
        sid = self.ids.get(key)
        if sid is None:
            sid = self.new(key)
        file, line, name = self.sites[sid]
        return f"{file}:{line} {name}"

    def write(self, run_dir: Path, rank: int, *, blocking: bool = True) -> None:
        """Append the sites and records not written yet to ``rank``'s files.

        The records are taken first: every site they name is in the table by then.
        Not ``blocking`` (a signal handler): nothing is written if another thread is
        naming a site or writing.
        """
        if not self._lock.acquire(blocking=blocking):
            return
        try:
            log = self.log
            n = len(log)
            records = log[:n]
            del log[:n]  # slicing and deleting are each one step: appends meanwhile stay
            new = self.sites[self._written :]
            table, binary = callsites_paths(run_dir, rank)
            if new:
                lines = "".join(json.dumps(list(site)) + "\n" for site in new)
                _append(table, lines.encode())
                self._written += len(new)
            if records:
                _append(binary, np.asarray(records, dtype="<i8").tobytes())
        finally:
            self._lock.release()


def _append(path: Path, data: bytes) -> None:
    fd = open_own(path, append=True)  # never through a link commlens did not make
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
