"""A matched run: a run's ops (:class:`RunOps`) with every op's instance, on a causal clock.

:func:`match_run` numbers the collectives and pairs the messages
(:mod:`commlens.analysis.matched.match`), then checks the clocks against the
order the matching implies (:mod:`commlens.analysis.matched.clocks`) and moves
a rank whose ops end before their peers issued them: what ``whatif`` replays,
and what ``report`` times: :func:`check_clocks` moves a view's clocks by the
same shifts before the rank pass reads it. A run larger than a chunk of steps
(:mod:`commlens.analysis.spill`) is checked a chunk at a time
(:func:`chunked_shifts`): the same shifts, its ops never all in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.analysis.matched.clocks import (
    MAX_WORLD,
    NONE,
    causal_shifts,
    lower_bounds,
    shift_clocks,
    shifts_of,
)
from commlens.analysis.matched.match import match_collectives, match_p2p
from commlens.analysis.matched.ops import (
    MATCH_COLUMNS,
    RunOps,
    read_ops,
    run_size,
    spill_ops,
    spilled_ops,
)
from commlens.analysis.spill import Index, chunk_width, chunks, spill_dir
from commlens.errors import RunFormatError
from commlens.optable import RECVS, SENDS
from commlens.trace.reader import RunView, open_run


@dataclass
class Matching:
    """Every op's instance: collectives first (group by group), then p2p pairs (channel
    by channel), each queue's instances in a row."""

    inst: np.ndarray
    """Instance of each event (int32)."""
    members: np.ndarray
    """Events in the order of their instances (stable; int32)."""
    first_of_queue: np.ndarray
    """True where an instance has no predecessor on its queue (the first of its group or
    channel, or one that ended before the one ahead of it on some rank)."""
    opens_queue: np.ndarray
    """True where an instance is the first of its group (of its p2p channel)."""
    send_of: np.ndarray
    """The send event of a p2p instance, -1 for a collective."""
    recv_of: np.ndarray
    """The receive event of a p2p instance, -1 for a collective."""
    chan: np.ndarray
    """Channel key of each p2p instance, ``(group·w + src)·w + dst`` (in instance order)."""
    clock_shifts: np.ndarray
    """Nanoseconds each rank's clock was moved by (:mod:`~commlens.analysis.matched.clocks`)."""

    @property
    def instances(self) -> int:
        return int(self.first_of_queue.size)

    @property
    def collectives(self) -> int:
        return int(np.count_nonzero(self.send_of < 0))


def match_run(ops: RunOps, *, clocks: bool = True) -> Matching:
    """Match ``ops`` and put them on a causal clock (``ops``' times are moved where a
    rank's clock breaks causality; :attr:`Matching.clock_shifts` says by how much);
    ``clocks`` False: the clocks were checked already, on the whole run ``ops`` is a
    chunk of (:func:`chunked_shifts`), and are not checked again (shifts all 0)."""
    matching = _matching(ops)
    if not clocks:
        matching.clock_shifts = np.zeros(ops.world_size, np.int64)
        return matching
    shifts = causal_shifts(ops, matching.inst, matching.members, matching.send_of, matching.recv_of)
    if shifts.any():
        shift_clocks(ops, shifts)
    matching.clock_shifts = shifts
    return matching


def _matching(ops: RunOps) -> Matching:
    """:func:`match_run` without the clock check (its ``clock_shifts`` empty)."""
    names = np.array(ops.op_names, dtype=object)
    is_send = np.isin(names, SENDS)[ops.op]
    is_recv = np.isin(names, RECVS)[ops.op]
    coll = np.flatnonzero(~(is_send | is_recv))
    sends, recvs = np.flatnonzero(is_send), np.flatnonzero(is_recv)
    del is_send, is_recv
    inst = np.empty(ops.events, dtype=np.int32)
    c_inst, first, opens = match_collectives(ops, coll)
    inst[coll] = c_inst
    n_coll = first.size
    send_of = np.full(n_coll, -1, dtype=np.int32)
    recv_of = np.full(n_coll, -1, dtype=np.int32)
    chan = np.zeros(0, dtype=np.int64)
    if sends.size or recvs.size:
        s_inst, r_inst, p_first, chan = match_p2p(ops, sends, recvs)
        inst[sends], inst[recvs] = s_inst + n_coll, r_inst + n_coll
        first, opens = np.r_[first, p_first], np.r_[opens, p_first]
        send_of = np.r_[send_of, np.zeros(p_first.size, dtype=np.int32)]
        recv_of = np.r_[recv_of, np.zeros(p_first.size, dtype=np.int32)]
        send_of[s_inst + n_coll], recv_of[r_inst + n_coll] = sends, recvs
    members = np.argsort(inst, kind="stable").astype(np.int32)
    return Matching(inst, members, first, opens, send_of, recv_of, chan, np.zeros(0, np.int64))


def check_clocks(view: RunView) -> dict[int, int]:
    """The causal check of ``view``'s run, once per view: the run's ops (every step)
    matched as ``whatif`` matches them (:func:`match_run`), and the view's clocks moved
    by the shifts found (:meth:`RunView.move_clocks`), so that every command times
    one event the same. A run whose ranks cannot be matched (desynchronised, a send
    without its receive) is taken as read. rank -> ns moved (non-zero only)."""
    if view.shifts is not None:
        return view.shifts
    if not view.scans:  # a loaded Run: its events are aligned as they are
        view.move_clocks({})
        return {}
    moved = {r: int(ns) for r, ns in enumerate(_shifts(view).tolist()) if ns}
    view.move_clocks(moved)
    for r, ns in moved.items():
        line = (
            f"rank {r}: clock moved by {ns / 1e6:+.3f} ms: with its measured offset its "
            "ops end before their peers issued them (corrected from the run's own order)"
        )
        if line not in view.warnings:
            view.warnings.append(line)
    return moved


def _shifts(view: RunView) -> np.ndarray:
    """The causal shifts of ``view``'s whole run (none where it cannot be matched)."""
    try:
        if view.steps is None:
            return _run_shifts(view)
        with open_run(view.path) as whole:
            return _run_shifts(whole)
    except RunFormatError:
        return np.zeros(0, np.int64)


def _run_shifts(view: RunView) -> np.ndarray:
    """The causal shifts of the run of ``view`` (all its steps): matched a chunk of steps
    at a time when it is larger than a chunk (:mod:`commlens.analysis.spill`), whole
    where its ops do not keep to their steps."""
    width = chunk_width(*run_size(view))
    if width is not None:
        with spill_dir() as folder:
            template, index = spill_ops(view, folder, width)
            shifts = chunked_shifts(template, index)
        if shifts is not None:
            return shifts
    return match_run(read_ops(view, MATCH_COLUMNS)).clock_shifts


def chunked_shifts(
    template: RunOps, index: Index, columns: tuple[str, ...] = MATCH_COLUMNS
) -> np.ndarray | None:
    """:func:`match_run`'s clock shifts of the spilled run ``index`` (:func:`spill_ops` of
    ``columns``, :data:`MATCH_COLUMNS` among them), its chunks matched one at a time and
    their bounds joined (:func:`~commlens.analysis.matched.clocks.lower_bounds`); None
    where a chunk cannot be matched alone (an instance or a message across chunks, or a
    run that cannot be matched at all: the whole run's matching decides)."""
    w = template.world_size
    if w < 2 or w > MAX_WORLD:
        return np.zeros(w, np.int64)
    bound = np.full((w, w), NONE, dtype=np.int64)
    skipped = []
    try:
        for chunk in chunks(index):
            if not _chunk_bounds(template, index, chunk, bound, pairs=False, columns=columns):
                skipped.append(chunk)
        if (bound < 0).any():  # the collectives' pairs matter: those left out too
            for chunk in skipped:
                _chunk_bounds(template, index, chunk, bound, pairs=True, columns=columns)
    except RunFormatError:
        return None
    return shifts_of(bound)


def _chunk_bounds(
    template: RunOps,
    index: Index,
    chunk: int,
    bound: np.ndarray,
    *,
    pairs: bool,
    columns: tuple[str, ...],
) -> bool:
    """Lower ``bound`` by ``chunk``'s matched ops (:func:`lower_bounds`)."""
    ops = spilled_ops(template, index, chunk, columns)
    m = _matching(ops)
    return lower_bounds(ops, m.inst, m.members, m.send_of, m.recv_of, bound, pairs=pairs)
