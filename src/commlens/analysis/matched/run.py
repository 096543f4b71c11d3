"""A matched run: a run's ops (:class:`RunOps`) with every op's instance, on a causal clock.

:func:`match_run` numbers the collectives and pairs the messages
(:mod:`commlens.analysis.matched.match`), then checks the clocks against the
order the matching implies (:mod:`commlens.analysis.matched.clocks`) and moves
a rank whose ops end before their peers issued them: what ``whatif`` replays,
and what ``report`` times (``rank_pass`` applies the same shifts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.analysis.matched.clocks import causal_shifts, shift_clocks
from commlens.analysis.matched.match import match_collectives, match_p2p
from commlens.analysis.matched.ops import RunOps, read_ops
from commlens.optable import RECVS, SENDS


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


def matched_run(path: str) -> tuple[RunOps, Matching]:
    """The run in ``path`` read (:func:`read_ops`) and matched (:func:`match_run`)."""
    ops = read_ops(path)
    return ops, match_run(ops)
