"""Per-rank records kept on disk by chunk of steps: the cross-rank work in bounded memory.

The ops of one step are matched with the ops of the same step on the other
ranks: a collective instance or a message never spans steps in a commlens
run (every rank issues a step's ops between the same two step marks). A
run of more than :data:`CHUNK_EVENTS` events is therefore matched a chunk
of steps at a time: each rank's records are written, as the rank is read,
by chunk (:class:`Spill`; set-up ops, step -1, in a chunk of
their own), and read back a chunk of every rank (:func:`read_chunk`) or a
rank of every chunk (:func:`read_rank`) at a time. Memory then holds one
rank's or one chunk's records, not the run's. A run whose ops do not keep
to the rule (an instance found in two chunks) is matched whole by the
caller, so that the answer never depends on the chunks.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from commlens.analysis.matched.intervals import segments
from commlens.errors import CommandError
from commlens.tempdirs import make_temp_dir

CHUNK_EVENTS = 250_000
"""About this many events of the run a chunk (a run of no more: matched whole)."""
SETUP = -1
"""The chunk of the ops outside every step."""


def chunk_width(events: int, steps: int, per_chunk: int | None = None) -> int | None:
    """Steps a chunk of about ``per_chunk`` events (:data:`CHUNK_EVENTS`) for a run of
    ``events`` events over ``steps`` steps; None when the run fits in one chunk (it is
    taken whole, in memory)."""
    per_chunk = CHUNK_EVENTS if per_chunk is None else per_chunk
    if events <= per_chunk:
        return None
    return max(1, per_chunk * max(steps, 1) // events)


def chunk_of(step: np.ndarray, width: int) -> np.ndarray:
    """The chunk of each event of ``step`` (:data:`SETUP` for an event of no step)."""
    step = step.astype(np.int64, copy=False)
    return np.where(step < 0, SETUP, step // width)


@contextmanager
def spill_dir() -> Iterator[Path]:
    """A temporary folder for spilled records, removed when the block ends; a folder that
    cannot be made is one :class:`CommandError` line (as a spill that cannot be written
    or read back: :func:`failed`)."""
    try:
        path = make_temp_dir("spill")
    except OSError as exc:
        raise failed(exc) from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def failed(exc: OSError) -> CommandError:
    """The error of a spill that cannot be made, written or read (a full or read-only
    temporary folder)."""
    return CommandError(
        f"cannot keep the matching's files in {tempfile.gettempdir()} ({exc.strerror or exc}); "
        "set TMPDIR to a folder with room (about 100 bytes an event)"
    )


Where = tuple[str, int, int]
"""A rank's records in one chunk: (file, first record, records)."""
Index = dict[int, dict[int, Where]]
"""rank -> chunk -> where its records are (the ranks of several spills: their union)."""


@dataclass
class Spill:
    """Records of one dtype, written rank by rank into one file under ``folder``,
    ``{prefix}.bin``, each rank's records of a chunk in one piece (:attr:`index`)."""

    folder: Path
    prefix: str
    dtype: np.dtype
    index: Index = field(default_factory=dict)
    _file: BinaryIO | None = None
    _rows: int = 0

    def add(self, rank: int, chunk: np.ndarray, records: np.ndarray) -> None:
        """``rank``'s ``records`` (in its order), each into its ``chunk``."""
        if not records.size:
            return
        if np.all(chunk[1:] >= chunk[:-1]):  # a rank's records in step order: as they are
            ordered = records
        else:
            order = np.argsort(chunk, kind="stable")
            chunk, ordered = chunk[order], records[order]
        starts = segments(chunk)
        by_chunk, ends = chunk[starts], np.r_[starts[1:], chunk.size]
        try:
            if self._file is None:
                self._file = (self.folder / f"{self.prefix}.bin").open("wb")
            np.ascontiguousarray(ordered).tofile(self._file)
        except OSError as exc:
            raise failed(exc) from None
        for c, lo, hi in zip(by_chunk.tolist(), starts.tolist(), ends.tolist(), strict=True):
            self.index.setdefault(rank, {})[c] = (str(self._file.name), self._rows + lo, hi - lo)
        self._rows += chunk.size

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as exc:
                raise failed(exc) from None


def chunks(index: Index) -> list[int]:
    """The chunks that hold records, in order (set-up first)."""
    return sorted({c for by_chunk in index.values() for c in by_chunk})


def read_chunk(index: Index, chunk: int, dtype: np.dtype) -> np.ndarray:
    """Every rank's records of ``chunk``, ranks in order."""
    parts = [_read(index[r][chunk], dtype) for r in sorted(index) if chunk in index[r]]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def read_rank(index: Index, rank: int, dtype: np.dtype) -> np.ndarray:
    """``rank``'s records of every chunk, chunks in order."""
    by_chunk = index.get(rank, {})
    parts = [_read(by_chunk[c], dtype) for c in sorted(by_chunk)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def read_one(index: Index, rank: int, chunk: int, dtype: np.dtype) -> np.ndarray | None:
    """``rank``'s records of ``chunk`` (None: it has none there)."""
    where = index.get(rank, {}).get(chunk)
    return None if where is None else _read(where, dtype)


def _read(where: Where, dtype: np.dtype) -> np.ndarray:
    path, first, count = where
    try:
        return np.fromfile(path, dtype=dtype, count=count, offset=first * dtype.itemsize)
    except OSError as exc:
        raise failed(exc) from None
