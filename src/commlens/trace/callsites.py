"""Where a rank's ops were called: its call sites, kept beside its events.

Two files per rank, both only appended to (by the capture's writer thread at
each checkpoint and at close, :mod:`commlens.capture.callsites`), so a rank
killed keeps them as of its last checkpoint, like its parts:

- ``callsites-NNNNN.jsonl``: the rank's call sites, one ``[file, line, function]``
  per line, a site's id being its line number from 0;
- ``callsites-NNNNN.bin``: one :data:`RECORD` per op, ``(seq, site id)``, the
  ``seq`` of the op's event (the rank's own sequence number), in no set order.

A run imported or generated, or captured before these files, has neither:
its ops have no call site ("").
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from commlens.safefile import DATA_LIMIT, read_bytes
from commlens.trace.layout import callsites_paths

RECORD = struct.Struct("<qq")
"""(seq, site id) of one op, little-endian."""


def site_text(file: str, line: int, function: str) -> str:
    """How a call site is written for people: ``file:line function``."""
    return f"{file}:{line} {function}"


def _table(path: Path) -> list[str]:
    """The call sites of a table file as text; a last line cut short is left out."""
    try:
        raw = read_bytes(path, limit=DATA_LIMIT, follow=False)
    except OSError:
        return []
    sites = []
    for line in raw.decode(errors="replace").splitlines():
        try:
            file, lineno, function = json.loads(line)
        except (ValueError, TypeError):
            break
        sites.append(site_text(str(file), int(lineno), str(function)))
    return sites


class CallSites:
    """One rank's call sites, looked up by event ``seq``."""

    def __init__(self, sites: list[str], seqs: np.ndarray, ids: np.ndarray) -> None:
        order = np.argsort(seqs, kind="stable")
        self.sites = sites
        self.seqs = seqs[order]
        self.ids = ids[order]

    def of(self, seqs: np.ndarray) -> list[str]:
        """The call site of each event ``seq`` ("" for one without)."""
        seqs = np.asarray(seqs, np.int64)
        if not self.seqs.size or not seqs.size:
            return [""] * seqs.size
        at = np.minimum(np.searchsorted(self.seqs, seqs), self.seqs.size - 1)
        hit = self.seqs[at] == seqs
        out = []
        for ok, sid in zip(hit.tolist(), self.ids[at].tolist(), strict=True):
            out.append(self.sites[sid] if ok and 0 <= sid < len(self.sites) else "")
        return out


def read_callsites(run_dir: Path, rank: int) -> CallSites:
    """``rank``'s call sites; empty where the run has none (missing or unreadable files,
    never followed through a link)."""
    table, records = callsites_paths(run_dir, rank)
    sites = _table(table)
    try:
        raw = read_bytes(records, limit=DATA_LIMIT, follow=False) if sites else b""
    except OSError:
        raw = b""
    usable = len(raw) - len(raw) % RECORD.size  # a record cut short by a kill is dropped
    pairs = np.frombuffer(raw, dtype="<i8", count=usable // 8).reshape(-1, 2)
    return CallSites(sites, pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64))
