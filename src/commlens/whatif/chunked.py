"""A run larger than :data:`CHUNK_EVENTS` replayed a chunk of steps at a time.

A replay holds its program whole (about 150 bytes an event at its peak), so a
run of tens of millions of events would hold gigabytes. Such a run is read
once, its clocks checked on the whole run
(:func:`~commlens.analysis.matched.run.check_clocks`), and its ops written to
disk by chunk of steps (:func:`~commlens.analysis.matched.ops.spill_ops`).
Each chunk is then a run of its own: matched, its op times fitted from its own
kept steps, replayed as captured and on every network. It starts with the
last step of the chunk before it (the set-up ops, for the first), replayed
but not counted, so that the skew between ranks its first counted step meets
is the replay's own, not the capture's. The chunks' figures join per step
(:class:`~commlens.whatif.results.Tally`): memory holds one chunk, not the
run. Measured against the whole replay: docs/whatif.md, "Runs larger than a
chunk".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from commlens.analysis.matched.ops import (
    FIELDS,
    NARROWED,
    OP_COLUMNS,
    narrowed,
    run_size,
    spill_ops,
    spilled_dtype,
)
from commlens.analysis.matched.run import check_clocks
from commlens.analysis.spill import SETUP, Index, chunks, read_chunk, spill_dir
from commlens.trace.reader import open_run
from commlens.whatif.backend import replay_backend
from commlens.whatif.source import Trace, check_replayable

CHUNK_EVENTS = 2_000_000
"""About this many events a chunk (a run of no more is replayed whole, as one chunk)."""
COLUMN_OF = {field: column for column, field in FIELDS.items()}
"""The event column of each :class:`Trace` field a chunk is read into."""


@dataclass
class Chunks:
    """A run spilled by chunk of steps, ready to be replayed a chunk at a time."""

    template: Trace
    """The run without its events: its names, groups, step windows and facts."""
    index: Index
    width: int
    """Steps a chunk: chunk ``c`` holds steps ``c·width .. (c + 1)·width - 1``."""
    events: int
    clock_shifts: dict[int, int]
    """rank -> ns its clock was moved by (non-zero only), found on the whole run."""


def chunk_width(events: int, steps: int) -> int | None:
    """Steps a chunk of a run of ``events`` over ``steps`` steps; None: one chunk."""
    if events <= CHUNK_EVENTS:
        return None
    return max(1, CHUNK_EVENTS * max(steps, 1) // events)


@contextmanager
def chunked_run(path: str | Path) -> Iterator[Chunks | None]:
    """The run in ``path`` spilled by chunk (removed when the block ends), or None where it
    is replayed whole: it fits in one chunk, or it is replayed on its streams (an imported
    GPU trace: :mod:`~commlens.whatif.streams`). :class:`RunFormatError` where it cannot be
    replayed."""
    with open_run(path) as view:
        events, steps = run_size(view)
        streamed = replay_backend(str(view.manifest.get("backend") or "")).streams
        width = None if streamed else chunk_width(events, steps)
        if width is None:
            yield None
            return
        shifts = check_clocks(view)
        with spill_dir() as folder:
            template, index = spill_ops(view, folder, width, OP_COLUMNS)
            template.name = Path(path).name or str(path)
            check_replayable(template, str(path), events)
            yield Chunks(template, index, width, events, shifts)


def chunk_traces(run: Chunks, keep: list[int]) -> Iterator[tuple[Trace, list[int]]]:
    """Each chunk that holds steps of ``keep``, as a run of its own (its warm-up step, the
    last step of the chunk before, first), and the steps of ``keep`` it holds."""
    dtype = spilled_dtype(OP_COLUMNS)
    ids = chunks(run.index)
    head = read_chunk(run.index, SETUP, dtype) if SETUP in ids else np.zeros(0, dtype)
    for c in (i for i in ids if i != SETUP):
        rec = read_chunk(run.index, c, dtype)
        mine = [s for s in keep if s // run.width == c]
        if mine:
            yield _trace(run.template, _by_rank(head, rec)), mine
        head = rec[rec["step"] == rec["step"].max()] if rec.size else head
        del rec


def _by_rank(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """The records of ``first`` and ``then`` (each by rank, in order), by rank: a rank's
    records of ``first`` before its records of ``then``."""
    if not first.size:
        return then
    both = np.concatenate([first, then])
    return both[np.argsort(both["rank"], kind="stable")]


def _trace(template: Trace, rec: np.ndarray) -> Trace:
    """The run of the records ``rec`` (:func:`chunk_traces`): its events and the windows of
    their steps."""
    events: dict[str, Any] = {
        field: narrowed(rec[field], COLUMN_OF.get(field, field))
        if COLUMN_OF.get(field, field) in NARROWED
        else rec[field].copy()
        for field in rec.dtype.names or ()
    }
    windows = np.isin(template.step_index, np.unique(rec["step"]))
    return replace(
        template,
        **events,
        step_rank=template.step_rank[windows],
        step_index=template.step_index[windows],
        step_start=template.step_start[windows],
        step_end=template.step_end[windows],
        warnings=list(template.warnings),
    )
