"""A run larger than :data:`CHUNK_EVENTS` replayed a chunk of steps at a time.

A replay holds its program whole (about 150 bytes an event at its peak), so a
run of tens of millions of events would hold gigabytes. Such a run is read
once and its ops written to disk by chunk of steps
(:func:`~commlens.analysis.matched.ops.spill_ops`). Each chunk is then a run of
its own: matched, its clocks checked, its op times fitted from its own kept
steps, replayed as captured and on every network (:func:`by_chunks`: where a
chunk's clocks are moved, the whole run's shifts are found and every chunk
replayed again, moved by them). It starts with the last step of the chunk
before it (the set-up ops, for the first), replayed but not counted, so that
the skew between ranks its first counted step meets is the replay's own, not
the capture's. The chunks' figures join per step
(:class:`~commlens.whatif.results.Tally`): memory holds one chunk, not the
run. Measured against the whole replay: docs/whatif.md, "Runs larger than a
chunk".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from commlens.analysis.matched.clocks import shift_clocks
from commlens.analysis.matched.ops import (
    FIELDS,
    NARROWED,
    OP_COLUMNS,
    narrowed,
    run_size,
    spill_ops,
    spilled_dtype,
)
from commlens.analysis.matched.run import chunked_shifts
from commlens.analysis.spill import SETUP, Index, chunk_width, chunks, read_chunk, spill_dir
from commlens.errors import RunFormatError
from commlens.trace.reader import RunView, open_run
from commlens.whatif.backend import replay_backend
from commlens.whatif.source import Trace, check_replayable

CHUNK_EVENTS = 2_000_000
"""About this many events a chunk (a run of no more is replayed whole, as one chunk)."""
T = TypeVar("T")
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
    shifts: np.ndarray
    """Per rank, the ns its clock is moved by (found on the whole run where a chunk's
    own check moved one: :func:`by_chunks`; else 0)."""

    @property
    def clock_shifts(self) -> dict[int, int]:
        """rank -> ns its clock was moved by (non-zero only)."""
        return {r: int(ns) for r, ns in enumerate(self.shifts.tolist()) if ns}


@contextmanager
def chunked_run(path: str | Path) -> Iterator[tuple[RunView, Chunks | None]]:
    """The run in ``path`` opened, and spilled by chunk (removed when the block ends), or
    None where it is replayed whole (read from the view): it fits in one chunk, or it is
    replayed on its streams (an imported GPU trace: :mod:`~commlens.whatif.streams`).
    :class:`RunFormatError` where it cannot be replayed."""
    with open_run(path) as view:
        events = sum(view.rows.values())
        streamed = replay_backend(str(view.manifest.get("backend") or "")).streams
        whole = streamed or events <= CHUNK_EVENTS  # then no step table needed
        width = None if whole else chunk_width(events, run_size(view)[1], CHUNK_EVENTS)
        if width is None:
            yield view, None
            return
        with spill_dir() as folder:
            template, index = spill_ops(view, folder, width, OP_COLUMNS)
            template.name = Path(path).name or str(path)
            check_replayable(template, str(path), events)
            no_shifts = np.zeros(template.world_size, np.int64)
            yield view, Chunks(template, index, width, events, no_shifts)


def by_chunks(
    run: Chunks, keep: list[int], one: Callable[[Trace, list[int], bool], tuple[T, bool]]
) -> list[T] | None:
    """``one`` of each chunk that holds steps of ``keep``, in order, or None where a chunk
    cannot be matched alone (an op waited in a later chunk: replay the run whole).

    ``one(trace, steps, checked)`` gives its answer and whether the chunk's own clock
    check moved a clock; ``checked``: the whole run's clocks were checked and the chunk's
    moved by them (:attr:`Chunks.shifts`), not to be checked again. The chunks are first
    taken as read, each checking its own clocks: where none moves one, the whole run's
    check would move none either (its bounds are the least of its chunks'). Else the
    whole run's shifts are found (:func:`chunked_shifts`) and every chunk taken again,
    moved by them."""
    try:
        parts = []
        for trace, steps in chunk_traces(run, keep):
            part, moved = one(trace, steps, False)
            if moved:
                break
            parts.append(part)
        else:
            return parts
        del parts
        shifts = chunked_shifts(run.template, run.index, OP_COLUMNS)
        if shifts is None:
            return None
        run.shifts = shifts
        return [one(trace, steps, True)[0] for trace, steps in chunk_traces(run, keep)]
    except RunFormatError:  # a chunk that cannot be matched alone
        return None


def chunk_traces(run: Chunks, keep: list[int]) -> Iterator[tuple[Trace, list[int]]]:
    """Each chunk that holds steps of ``keep``, as a run of its own (its warm-up step, the
    last step of the chunk before, first), and the steps of ``keep`` it holds."""
    dtype = spilled_dtype(OP_COLUMNS)
    ids = chunks(run.index)
    head = read_chunk(run.index, SETUP, dtype) if SETUP in ids else np.zeros(0, dtype)
    windows = run.template.step_index
    for c in (i for i in ids if i != SETUP):
        rec = read_chunk(run.index, c, dtype)
        mine = [s for s in keep if s // run.width == c]
        if mine:
            warm_up = head["step"].max() if head.size else SETUP
            steps = (windows // run.width == c) | ((windows == warm_up) & (warm_up >= 0))
            yield _trace(run.template, head, rec, steps, run.shifts), mine
        head = rec[rec["step"] == rec["step"].max()]
        del rec


def _trace(
    template: Trace, head: np.ndarray, rec: np.ndarray, windows: np.ndarray, shifts: np.ndarray
) -> Trace:
    """The run of the records ``head`` then ``rec`` (:func:`chunk_traces`; each by rank, in
    order: a rank's ``head`` records go before its ``rec`` records) and of the step windows
    of ``template`` where ``windows`` is True, each rank's clock moved by its ``shifts``."""
    at = np.searchsorted(rec["rank"], head["rank"])

    def column(field: str) -> np.ndarray:
        values = np.insert(rec[field], at, head[field]) if head.size else rec[field].copy()
        name = COLUMN_OF.get(field, field)
        return narrowed(values, name) if name in NARROWED else values

    events: dict[str, Any] = {field: column(field) for field in rec.dtype.names or ()}
    trace = replace(
        template,
        **events,
        step_rank=template.step_rank[windows],
        step_index=template.step_index[windows],
        step_start=template.step_start[windows],
        step_end=template.step_end[windows],
        warnings=list(template.warnings),
    )
    if shifts.any():
        shift_clocks(trace, shifts)
    return trace
