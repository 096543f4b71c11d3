"""A matched run: a run's ops (:class:`RunOps`) with every op's instance, on a causal clock.

:func:`match_run` numbers the collectives and pairs the messages
(:mod:`commlens.analysis.matched.match`), then checks the clocks against the
order the matching implies (:mod:`commlens.analysis.matched.clocks`) and moves
a rank whose ops end before their peers issued them: what ``whatif`` replays,
and what ``report`` times: :func:`check_clocks` moves a view's clocks by the
same shifts before the rank pass reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.analysis.matched.clocks import causal_shifts, shift_clocks
from commlens.analysis.matched.match import match_collectives, match_p2p
from commlens.analysis.matched.ops import MATCH_COLUMNS, RunOps, read_ops
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


def match_run(ops: RunOps) -> Matching:
    """Match ``ops`` and put them on a causal clock (``ops``' times are moved where a
    rank's clock breaks causality; :attr:`Matching.clock_shifts` says by how much)."""
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
    matching = Matching(inst, members, first, opens, send_of, recv_of, chan, np.zeros(0, np.int64))
    shifts = causal_shifts(ops, inst, members, send_of, recv_of)
    if shifts.any():
        shift_clocks(ops, shifts)
    matching.clock_shifts = shifts
    return matching


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
            return match_run(read_ops(view, MATCH_COLUMNS)).clock_shifts
        with open_run(view.path) as whole:
            return match_run(read_ops(whole, MATCH_COLUMNS)).clock_shifts
    except RunFormatError:
        return np.zeros(0, np.int64)
