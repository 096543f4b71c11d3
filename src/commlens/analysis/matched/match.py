"""Who meets whom: collectives matched across the members of their group, sends to receives.

One rule for every command. A process group numbers its collectives: the
k-th collective a rank issues on a group (its ops in issue order, sends and
receives left out) is the group's collective k, on every member, whatever
op it is. Instance ids are dense, group by group (:class:`Numbering`): a
group's instances take as many ids as the most calls any member made. An
instance is *complete* when every member of the group recorded it, and
*agrees* when they all recorded the same op; one that does not is where the
ranks desynchronised (``report`` leaves such instances out, ``whatif``
refuses the run).

A send is matched with the receive of the same (group, source, destination)
at the same position: the k-th message rank a sent rank b on a group is the
k-th rank b received from rank a there (:func:`match_p2p`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.analysis.matched.intervals import segments
from commlens.analysis.matched.ops import RunOps
from commlens.errors import RunFormatError


def positions(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of each row among the earlier rows with the same key, from 0; the
    rows' stable order by key)."""
    order = np.argsort(key, kind="stable")
    starts = segments(key[order])
    lengths = np.diff(np.append(starts, key.size))
    ahead = np.arange(key.size, dtype=np.int64)
    ahead -= np.repeat(starts, lengths)  # in place: a run's key arrays are its largest
    del starts, lengths
    out = np.empty(key.size, np.int64)
    out[order] = ahead
    return out, order


def kth(code: np.ndarray, n_codes: int) -> np.ndarray:
    """:func:`positions` of dense codes ``0..n_codes-1`` (int32; without a sort when the
    codes are few)."""
    if n_codes > 64:
        return positions(code)[0].astype(np.int32)
    k = np.empty(code.size, np.int32)
    for value in range(n_codes):  # the usual case: a few groups
        idx = np.flatnonzero(code == value)
        k[idx] = np.arange(idx.size)
    return k


@dataclass(frozen=True)
class Numbering:
    """Dense instance ids of a run's collectives, group by group."""

    groups: np.ndarray
    """The numbered group codes, sorted."""
    offset: np.ndarray
    """Id of each group's first instance; one more entry: the number of instances."""

    @property
    def total(self) -> int:
        return int(self.offset[-1])

    def ids(self, group: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The instance of the ``k``-th collective on ``group`` (numbered groups only)."""
        return self.offset[np.searchsorted(self.groups, group)] + k

    def group_of(self, ids: np.ndarray) -> np.ndarray:
        """The index into :attr:`groups` of each instance's group."""
        return np.searchsorted(self.offset, ids, side="right") - 1


def numbering(calls: dict[int, int]) -> Numbering:
    """The numbering of groups that got at most ``calls[group]`` collectives from a member."""
    groups = np.array(sorted(calls), np.int64)
    counts = np.array([calls[g] for g in groups.tolist()], np.int64)
    return Numbering(groups, np.r_[0, np.cumsum(counts)].astype(np.int64))


def agreement(
    ids: list[np.ndarray], ops: list[np.ndarray], total: int
) -> tuple[np.ndarray, np.ndarray]:
    """(members seen, whether they all issued the same op) of each instance, from the
    members' instance ids and op codes (one array of each per rank, or all in one)."""
    seen = np.zeros(total, np.int64)
    ref = np.full(total, -1, np.int64)
    for i, o in zip(ids, ops, strict=True):
        seen += np.bincount(i, minlength=total)
        ref[i] = o  # one member's op (the last written)
    agrees = np.ones(total, bool)
    for i, o in zip(ids, ops, strict=True):
        agrees[i[o != ref[i]]] = False
    return seen, agrees


def match_collectives(ops: RunOps, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(instance, first-of-queue flags, first-of-group flags) of the collective events
    ``idx`` of a whole run (events by rank, in issue order); :class:`RunFormatError`
    where a rank issued on a group it is not in, or the members of a group issued
    different numbers of collectives or different ops at one position.

    An instance is the first of its queue unless it followed the one before it on
    its group on every rank: one that ended on some rank before the one ahead of it
    (gloo runs a group's async ops on several threads) did not queue."""
    n_ranks = int(ops.rank.max()) + 1
    cells = len(ops.groups) * n_ranks
    # (group, rank) of each event as one key, 32-bit where it fits
    cell = ops.group[idx].astype(np.int32 if cells < 2**31 else np.int64)
    cell *= n_ranks
    cell += ops.rank[idx]
    pos, order = positions(cell)  # order: by group, rank, then position
    counts = np.bincount(cell, minlength=cells).reshape(-1, n_ranks)
    calls = {}
    for g, ranks in enumerate(ops.groups):
        present = np.flatnonzero(counts[g])
        if not present.size:
            continue
        name = ops.group_names[g]
        ranks = ranks or tuple(int(r) for r in present)
        outside = sorted(set(present.tolist()) - set(ranks))
        if outside:
            raise RunFormatError(
                f"{ops.name}: rank {outside[0]} issued ops on group {name!r}, which it is not in"
            )
        per = counts[g, [r for r in ranks if r < n_ranks]]
        if len(ranks) > n_ranks or per.min() != per.max():
            raise RunFormatError(
                f"{ops.name}: the ranks of group {name!r} issued different numbers of "
                f"collectives ({per.min()}..{per.max()}); a run whose ranks desynchronised "
                "or stopped early cannot be replayed"
            )
        calls[g] = int(per[0])
    number = numbering(calls)
    inst = number.ids(cell // n_ranks, pos)
    del pos
    _, agrees = agreement([inst], [ops.op[idx]], number.total)
    if not agrees.all():
        i = int(np.flatnonzero(~agrees)[0])
        at = int(number.group_of(np.array([i]))[0])
        found = np.unique(ops.op[idx][inst == i]).tolist()
        raise RunFormatError(
            f"{ops.name}: collective {i - int(number.offset[at]) + 1} on group "
            f"{ops.group_names[int(number.groups[at])]!r} is {ops.op_names[found[0]]} on one "
            f"rank and {ops.op_names[found[-1]]} on another; the ranks desynchronised and the "
            "run cannot be replayed"
        )
    opens = np.zeros(number.total, dtype=bool)
    opens[number.offset[:-1][np.diff(number.offset) > 0]] = True
    first = opens.copy()
    cell = cell[order]  # the next op on the same group and rank follows in this order
    same = cell[1:] == cell[:-1]
    del cell
    t_end = ops.t_end[idx[order]]
    same &= t_end[1:] < t_end[:-1]  # it ended before the one ahead of it
    del t_end
    first[inst[order[1:][same]]] = True
    return inst, first, opens


def match_p2p(
    ops: RunOps, sends: np.ndarray, recvs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(instance of each send, of each recv, first-of-channel flags, channel key of each
    instance ``(group·w + src)·w + dst``); :class:`RunFormatError` where a channel's
    sends and receives do not pair up."""
    w = int(max(ops.rank.max(), ops.peer.max())) + 1
    send_key = (ops.group[sends].astype(np.int64) * w + ops.rank[sends]) * w + ops.peer[sends]
    recv_key = (ops.group[recvs].astype(np.int64) * w + ops.peer[recvs]) * w + ops.rank[recvs]
    if (ops.peer[sends] < 0).any() or (ops.peer[recvs] < 0).any():
        raise RunFormatError(f"{ops.name}: a send or recv without a peer rank cannot be replayed")
    s_pos, r_pos = positions(send_key)[0], positions(recv_key)[0]
    channels, s_chan = np.unique(send_key, return_inverse=True)
    r_chan = np.searchsorted(channels, recv_key)
    r_known = (r_chan < channels.size) & (
        channels[np.minimum(r_chan, channels.size - 1)] == recv_key
    )
    s_count = np.bincount(s_chan, minlength=channels.size)
    r_count = np.bincount(r_chan[r_known], minlength=channels.size)
    if not r_known.all() or (s_count != r_count).any():
        key = (
            int(recv_key[~r_known][0])
            if not r_known.all()
            else int(channels[np.flatnonzero(s_count != r_count)[0]])
        )
        src, dst = (key // w) % w, key % w
        raise RunFormatError(
            f"{ops.name}: rank {src} sent rank {dst} a different number of messages than rank "
            f"{dst} received from it; unmatched point-to-point ops cannot be replayed"
        )
    base = np.r_[0, np.cumsum(s_count)]
    first = np.zeros(int(base[-1]), dtype=bool)
    first[base[:-1]] = True
    return (
        base[s_chan] + s_pos,
        base[r_chan] + r_pos,
        first,
        channels[np.repeat(np.arange(channels.size), s_count)],
    )
