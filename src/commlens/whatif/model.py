"""The replay model of a run: per rank, what it does in order; across ranks, who meets whom.

Every rank becomes a list of *marks* in the order it reached them, each after
a compute gap (the time the rank spent neither issuing nor held, as
measured):

- ``ISSUE e``: the rank issues async op ``e`` (one event) and goes on;
- ``HOLD e``: the rank is held until async op ``e`` ends, at its ``wait()``;
- ``BLOCK e``: the rank issues blocking op ``e`` and is held until it ends;
- ``STEP j``: a step starts or ends (``j`` = 2·row, 2·row + 1 of the step table).

Ops become *instances* by the matched run's one rule
(:mod:`commlens.analysis.matched.match`: the k-th collective every member
issued on a group is one instance; a send is matched with the receive of the
same (group, source, destination) at the same position). Instances of
one group (of one p2p channel) form a queue: one starts when all its members
issued it and the one before it on the queue has ended, unless the capture
shows it ending before that one on some rank (gloo runs a group's async ops
on several threads): then it does not queue. A pair is a rendezvous (gloo
moves a message once its receive is posted): it starts when both its send
and its receive were issued (and the pair before it on its channel has
ended), unless the capture shows the send ending before its receive was
issued; such a send is eager and starts once issued. A receive ends when
the data has arrived, or at its own issue if later.

Where the trace does not say when an async op was waited for (``t_wait = 0``:
DDP's buckets are waited from C++), the wait is put at the last issue of its
burst (consecutive un-waited async ops of one group in one step), as DDP's
backward waits for all its buckets at its end; where the burst's next op on
its group in the step is async with a recorded wait (DDP's last bucket, whose
wait was seen), with that op, at its wait; when the rank evidently went on
before the burst completed, at the op's own completion instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

import numpy as np

from commlens.analysis.matched.run import match_run
from commlens.whatif.source import Trace


class Mark(IntEnum):
    """What a rank does at a mark (see the module docstring)."""

    ISSUE = 0
    """Issues an async op and goes on."""
    BLOCK = 1
    """Issues a blocking op and is held until it ends."""
    HOLD = 2
    """Is held until an async op ends (its ``wait()``)."""
    STEP = 3
    """A step starts or ends."""


ISSUE, BLOCK, HOLD, STEP = (m.value for m in Mark)
"""The :class:`Mark` values as plain ints, as the programs store them."""


@dataclass
class Program:
    """A run ready for replay (see the module docstring)."""

    trace: Trace
    mark_types: list[np.ndarray]
    """Per rank, the :class:`Mark` of each mark (int8). Here and in :attr:`args` and
    :attr:`gaps` each rank's is a view of one array of every rank's, laid end to end
    (the replay reads them whole)."""
    args: list[np.ndarray]
    """Per rank, the event (ISSUE, HOLD) or step slot (STEP) of each mark (int32)."""
    gaps: list[np.ndarray]
    """Per rank, seconds of compute before each mark (float64)."""
    inst: np.ndarray
    """Instance of each event. This and the index fields below (:data:`INDEX_FIELDS`) are
    int32 or flags, read-only: every replay of the program reads them as they are."""
    members: np.ndarray
    """Events of instance i: ``members[offsets[i]:offsets[i + 1]]``."""
    offsets: np.ndarray
    first_of_queue: np.ndarray
    """True where an instance is the first of its queue (no predecessor)."""
    opens_queue: np.ndarray
    """True where an instance is the first of its group (of its p2p channel): unlike
    :attr:`first_of_queue`, False for one that ended before the one ahead of it."""
    send_of: np.ndarray
    """The send event of a p2p instance, -1 for a collective."""
    recv_of: np.ndarray
    """The receive event of a p2p instance, -1 for a collective."""
    rendezvous: np.ndarray
    """True where a p2p pair starts only once its receive was issued too (False for an
    eager send, which ended in the capture before its receive was issued, and for a
    collective)."""
    reverse: np.ndarray
    """Per instance, the pair whose data its receiver's ready notice may follow (-1 for
    none): the last message the receiver sent back to the sender on their connection
    before it posted the receive (see :func:`_reverse_pairs`)."""
    behind: np.ndarray
    """True where the capture shows the ready notice following :attr:`reverse`'s data: a
    rendezvous pair's receiver tells the sender it is ready on their connection, behind
    the message it was itself still sending back on it, so the pair starts no earlier
    than that message's arrival."""
    inst_size: np.ndarray
    inst_group: np.ndarray
    """Cost group of each instance: an index into ``cost_groups`` (int32)."""
    cost_groups: list[tuple[int, ...]]
    """Members of a collective's group, or (source, destination) of a p2p channel."""
    t0_ns: int
    """Capture time that replay time 0 stands for."""
    clock_shifts: np.ndarray
    """Nanoseconds each rank's clock was corrected by (see
    :mod:`commlens.analysis.matched.clocks`)."""

    @property
    def instances(self) -> int:
        return int(self.first_of_queue.size)

    @property
    def inst_role(self) -> np.ndarray:
        """Role code of each instance (that of its first member), int32; made anew at
        each use (10 ms at 1 M events), not kept beside the program."""
        roles = np.zeros(self.instances, dtype=np.int32)
        roles[self.inst[::-1]] = self.trace.role[::-1]
        return roles

    @cached_property
    def size_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """(the run's distinct message sizes, sorted; each instance's index into them,
        int32). Made once (4 bytes an instance)."""
        sizes, size_of = np.unique(self.inst_size, return_inverse=True)
        return sizes, size_of.ravel().astype(np.int32)

    @cached_property
    def role_groups(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The distinct (role, cost group index) of the collectives' instances, and of the
        point-to-point pairs', sorted. Made once for every costing of the program."""
        n_groups, roles = len(self.cost_groups), self.inst_role
        pairs = self.send_of >= 0
        out: list[list[tuple[int, int]]] = []
        for is_p2p in (False, True):
            mine = pairs == is_p2p
            keys = np.unique(roles[mine].astype(np.int64) * n_groups + self.inst_group[mine])
            out.append([(k // n_groups, k % n_groups) for k in keys.tolist()])
        return out[0], out[1]

    @cached_property
    def cost_keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(distinct message sizes, distinct cost keys, each instance's index into the
        keys, int32): an instance's cost key is ``(group · roles + role) · sizes + size
        index``, all that its cost depends on but its op. Made once for every costing
        of the program (two sorts of the instances, 0.17 s a costing at 1 M events)."""
        sizes, size_of = self.size_levels
        key = self.inst_group.astype(np.int64) * len(self.trace.role_names) + self.inst_role
        key *= sizes.size
        key += size_of
        keys, key_of = np.unique(key, return_inverse=True)
        return sizes, keys, key_of.ravel().astype(np.int32)


BUILD_ONLY = ("group", "peer", "is_async", "t_wait")
"""The trace's columns that only :func:`build_program` reads (matching, clock check,
wait points): the program holds what they say."""
CAPTURED_TIMES = ("t_issue", "t_end")
"""The trace's captured op times: read by the build, the self-check and the builders of op
times (measured durations, fits, the capture's queue releases), not by a network's
replay or its figures."""


def release_captured_times(trace: Trace) -> None:
    """Empty the trace's :data:`CAPTURED_TIMES` (16 bytes an event) once the self-check and
    the builder of op times have read them: a network's replay needs only the program
    and its op times."""
    for name in CAPTURED_TIMES:
        setattr(trace, name, getattr(trace, name)[:0].copy())


INDEX_FIELDS: dict[str, type[np.generic]] = {
    "inst": np.int32,
    "members": np.int32,
    "offsets": np.int32,
    "first_of_queue": np.bool_,
    "opens_queue": np.bool_,
    "send_of": np.int32,
    "recv_of": np.int32,
    "rendezvous": np.bool_,
    "reverse": np.int32,
    "behind": np.bool_,
}
"""The program's index fields and their types."""


def frozen(values: np.ndarray, name: str) -> np.ndarray:
    """A read-only copy of ``values`` in the type of the index field ``name``."""
    out = np.array(values, dtype=INDEX_FIELDS[name])
    out.flags.writeable = False
    return out


def _wait_points(tr: Trace, lo: int, hi: int, marks_after: np.ndarray) -> np.ndarray:
    """Capture time of the ``wait()`` of each async event of one rank (events lo..hi)."""
    t_issue, t_end = tr.t_issue[lo:hi], tr.t_end[lo:hi]
    wait = tr.t_wait[lo:hi]
    asy = tr.is_async[lo:hi]
    w = np.clip(t_end - np.maximum(wait, 0), t_issue, np.maximum(t_end, t_issue))
    unseen = asy & (wait <= 0)
    if not unseen.any():
        return w
    group, step = tr.group[lo:hi], tr.step[lo:hi]
    n = hi - lo
    same = np.r_[
        False, unseen[1:] & unseen[:-1] & (group[1:] == group[:-1]) & (step[1:] == step[:-1])
    ]
    run = np.cumsum(~same) - 1
    starts = np.flatnonzero(~same)
    last = np.r_[starts[1:], n] - 1
    run_end = np.maximum.reduceat(t_end, starts)
    # a burst whose next op (same group and step) is an async op with a recorded wait
    # is waited with it (DDP waits for all its buckets at once, its last one's wait seen)
    joined = np.r_[
        unseen[:-1] & asy[1:] & ~unseen[1:] & (group[1:] == group[:-1]) & (step[1:] == step[:-1]),
        False,
    ][last]
    last = np.where(joined, last + 1, last)
    run_issue = np.where(joined, w[last], t_issue[last])
    next_issue = np.r_[t_issue[1:], np.iinfo(np.int64).max][last]
    next_mark = np.minimum(
        next_issue, marks_after[np.searchsorted(marks_after, run_issue, "right")]
    )
    burst = np.where(next_mark >= run_end, run_issue, -1)[run]
    return np.where(unseen, np.where(burst >= 0, np.maximum(burst, t_issue), t_end), w)


def _reverse_pairs(
    tr: Trace,
    send_of: np.ndarray,
    recv_of: np.ndarray,
    rendezvous: np.ndarray,
    chan: np.ndarray,
    n_coll: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per instance, the pair ``j`` whose data the ready notice of rendezvous pair ``k``
    may follow (-1 for none), and whether it did in the capture.

    gloo sends a message only once its receiver has told the sender it posted the
    receive; that notice travels on the two ranks' connection (one per group) behind
    whatever the receiver is still sending the sender on it. ``j`` is the last
    message of the reverse channel whose send the receiver issued before its receive
    of ``k`` (a rendezvous too: an eager receive's end is its issue, not its data's
    arrival). The notice followed it where ``j`` had started when that receive was
    issued (a batch of ops shares one issue time: its send goes first; ``j``'s own
    receive posted before, else ``j``'s data waited for a notice sent at the same
    time) and had not arrived yet: then ``k`` starts no earlier than ``j``'s arrival
    (1F1B's steady state, measured: docs/whatif.md). The replay applies the same test to
    its own times (:func:`~commlens.whatif.replay.replay`). ``chan`` is each pair's
    channel key, ``(group·w + src)·w + dst``, in instance order (a channel's pairs in
    a row, channels in key order)."""
    reverse = np.full(send_of.size, -1, dtype=np.int32)
    behind = np.zeros(send_of.size, dtype=bool)
    if not chan.size:
        return reverse, behind
    w = int(max(tr.rank.max(), tr.peer.max())) + 1
    pairs = np.arange(n_coll, send_of.size)
    s, r = send_of[pairs], recv_of[pairs]
    channels, c = np.unique(chan, return_inverse=True)
    c = c.ravel()
    group, src, dst = chan // (w * w), chan // w % w, chan % w
    back = (group * w + dst) * w + src
    rc = np.minimum(np.searchsorted(channels, back), channels.size - 1)
    span = np.int64(tr.events + 1)
    # the receiver's last send on the reverse channel before its receive (one rank's
    # events are in issue order; a channel's sends too)
    j = np.searchsorted(c * span + s, rc * span + r) - 1
    jj = np.maximum(j, 0)
    sj, rj = s[jj], r[jj]
    found = (channels[rc] == back) & (j >= 0) & (c[jj] == rc)
    found &= rendezvous[pairs] & rendezvous[pairs][jj]
    reverse[pairs[found]] = (jj[found] + n_coll).astype(np.int32)
    posted = tr.t_issue[r]
    started = np.maximum(tr.t_issue[sj], tr.t_issue[rj])
    followed = found & (started <= posted) & (tr.t_issue[rj] < posted) & (posted < tr.t_end[rj])
    behind[pairs[followed]] = True
    return reverse, behind


def build_program(tr: Trace, *, clocks: bool = True) -> Program:
    """Match the run's ops into instances and check the clocks against them
    (:func:`commlens.analysis.matched.run.match_run`: a rank whose ops end before
    their peers issued them is corrected) and lay out every rank's marks.

    The program takes ``tr`` over (it is the program's trace): a clock correction
    moves its times, and its build-only columns (:data:`BUILD_ONLY`), whose
    content the program now holds, are emptied to free their memory. ``clocks`` False:
    ``tr`` is a chunk of a run whose clocks were checked whole (:func:`match_run`)."""
    m = match_run(tr, clocks=clocks)
    n_coll = m.collectives
    cost_groups = list(tr.groups)
    inst_group = np.zeros(n_coll, dtype=np.int32)
    coll = np.flatnonzero(m.inst < n_coll)
    inst_group[m.inst[coll]] = tr.group[coll]
    del coll
    if m.chan.size:
        w = int(max(tr.rank.max(), tr.peer.max())) + 1
        pairs, pair_of = np.unique(m.chan % (w * w), return_inverse=True)
        inst_group = np.r_[inst_group, (len(cost_groups) + pair_of.ravel()).astype(np.int32)]
        cost_groups += [(int(p // w), int(p % w)) for p in pairs]
    total = m.instances
    inst_size = np.zeros(total, dtype=np.int64)
    # the sizes as int64, as the sums: numpy's fast path (a narrowed column takes 10x)
    np.maximum.at(inst_size, m.inst, tr.size_bytes.astype(np.int64, copy=False))
    views: dict[str, np.ndarray] = {}
    offsets = np.r_[0, np.cumsum(np.bincount(m.inst, minlength=total))]
    for name, values in (
        ("offsets", offsets),
        ("first_of_queue", m.first_of_queue),
        ("opens_queue", m.opens_queue),
        ("members", m.members),
        ("inst", m.inst),
        ("send_of", m.send_of),
        ("recv_of", m.recv_of),
    ):
        views[name] = frozen(values, name)
    del offsets, values
    chan, shifts = m.chan, m.clock_shifts
    del m  # the wider copies
    pairs = np.flatnonzero(views["send_of"] >= 0)
    meets = np.zeros(total, dtype=bool)
    s, r = views["send_of"][pairs], views["recv_of"][pairs]
    meets[pairs] = tr.t_end[s] >= tr.t_issue[r]
    del pairs, s, r
    views["rendezvous"] = frozen(meets, "rendezvous")
    reverse, behind = _reverse_pairs(tr, views["send_of"], views["recv_of"], meets, chan, n_coll)
    views["reverse"] = frozen(reverse, "reverse")
    views["behind"] = frozen(behind, "behind")
    del meets, reverse, behind
    mark_types, args, gaps, t0 = _marks(tr)
    for name in BUILD_ONLY:
        setattr(tr, name, getattr(tr, name)[:0].copy())
    return Program(
        trace=tr,
        mark_types=mark_types,
        args=args,
        gaps=gaps,
        **views,
        inst_size=inst_size,
        inst_group=inst_group,
        cost_groups=cost_groups,
        t0_ns=t0,
        clock_shifts=shifts,
    )


def _marks(tr: Trace) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], int]:
    """Per rank: mark types, arguments and compute gaps (s), each a view of one array of
    every rank's (:attr:`Program.mark_types`), and the capture time of 0."""
    ranks = range(tr.world_size)
    ev_bounds = np.searchsorted(tr.rank, np.arange(tr.world_size + 1))
    st_bounds = np.searchsorted(tr.step_rank, np.arange(tr.world_size + 1))
    firsts = [tr.t_issue[ev_bounds[:-1][ev_bounds[:-1] < ev_bounds[1:]]], tr.step_start]
    t0 = int(min(int(a.min()) for a in firsts if a.size))
    counts = [  # a mark per event, per async event's wait, per step's start and end
        int(ev_bounds[r + 1] - ev_bounds[r])
        + np.count_nonzero(tr.is_async[ev_bounds[r] : ev_bounds[r + 1]])
        + 2 * int(st_bounds[r + 1] - st_bounds[r])
        for r in ranks
    ]
    at = np.r_[0, np.cumsum(counts, dtype=np.int64)]
    flat = np.empty(at[-1], np.int8), np.empty(at[-1], np.int32), np.empty(at[-1])
    types, args, gaps = ([a[at[r] : at[r + 1]] for r in ranks] for a in flat)
    for r in ranks:
        lo, hi = int(ev_bounds[r]), int(ev_bounds[r + 1])
        s_lo, s_hi = int(st_bounds[r]), int(st_bounds[r + 1])
        step_t = np.c_[tr.step_start[s_lo:s_hi], tr.step_end[s_lo:s_hi]].ravel()
        step_slot = np.arange(2 * s_lo, 2 * s_hi)
        marks_after = np.r_[np.sort(step_t), np.iinfo(np.int64).max]
        w = _wait_points(tr, lo, hi, marks_after)
        e = np.arange(lo, hi)
        t_issue, t_end = tr.t_issue[lo:hi], tr.t_end[lo:hi]
        asy = tr.is_async[lo:hi]
        waits = np.flatnonzero(asy)
        m = step_t.size
        time = np.r_[t_issue, w[waits], step_t]
        prio = np.r_[np.ones(hi - lo), np.full(waits.size, 2), np.zeros(m)]
        tie = np.r_[e, e[waits], step_slot]
        mark = np.r_[np.where(asy, ISSUE, BLOCK), np.full(waits.size, HOLD), np.full(m, STEP)]
        arg = np.r_[e, e[waits], step_slot]
        free = np.r_[
            np.where(asy, t_issue, np.maximum(t_issue, t_end)),
            np.maximum(w[waits], t_end[waits]),
            step_t,
        ]
        order = np.lexsort((tie, prio, time))
        time, free = time[order], np.maximum.accumulate(free[order])
        before = np.r_[t0, free[:-1]]
        types[r][:] = mark[order]
        args[r][:] = arg[order]
        gaps[r][:] = np.maximum(time - before, 0) / 1e9
    return types, args, gaps, t0
