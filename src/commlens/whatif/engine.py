"""The replay's kernel: the ranks, collectives and pairs of :mod:`~commlens.whatif.replay`,
on flat arrays (compiled: :mod:`~commlens.whatif.compiled`).

:func:`run` takes the program and its op times (:class:`Ops`) and fills the
replay's state (:class:`State`): per event its issue and end, per instance its
start and :data:`QUEUED`/``STARTED``, per rank its clock and the event it is
held for. A rank held for an op whose end is not known yet (one of its own) is
parked (:attr:`State.waiting`) and made ready when it ends; pairs whose ready
notice follows a pair not started or not arrived wait on it
(:attr:`State.after_head`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from commlens.whatif.buckets import Buckets, bucket_add, draw
from commlens.whatif.compiled import entry, index, inline, kernel, larger
from commlens.whatif.links import FINISHED, Links, due, join, pop_due, serve

ISSUE, BLOCK, HOLD, STEP = 0, 1, 2, 3
"""The marks (:class:`~commlens.whatif.model.Mark`)."""
PENDING, STARTED, QUEUED = 0, 1, 2
"""Where an instance stands (:attr:`State.state`): not started (a member has not issued
it yet, or the one ahead has not started); started when its last member issued it (a
pair: when it could meet); started later than that, behind its queue's previous
instance (or for a worker)."""
NOT_YET = math.inf
"""The time of what has not happened yet in the replay (an issue, an end, an arrival)."""
NO_EVENT = -1
"""In place of an event or instance index: none."""
READY, RESUME, FOREIGN = 0, 1, 2
"""Slots of :attr:`State.counts`: ranks ready to go on, pairs to resume, 1 where a rank
was held for another rank's op (not a program :func:`~commlens.whatif.model.build_program`
makes)."""


class Ops(NamedTuple):
    """The program and its op times, as the kernel reads them."""

    kinds: np.ndarray
    """Every rank's marks, one after the other (rank r's: ``mark_lo[r]:mark_lo[r + 1]``):
    their :class:`~commlens.whatif.model.Mark`, event or step slot, compute gap."""
    args: np.ndarray
    gaps: np.ndarray
    mark_lo: np.ndarray
    owner: np.ndarray
    """Per event, its rank."""
    inst_of: np.ndarray
    members: np.ndarray
    offsets: np.ndarray
    first: np.ndarray
    head: np.ndarray
    """Where an instance has none ahead of it on its group's workers."""
    send_of: np.ndarray
    recv_of: np.ndarray
    meets: np.ndarray
    reverse: np.ndarray
    behind: np.ndarray
    duration: np.ndarray
    drained: np.ndarray
    free_after: np.ndarray
    free_drained: np.ndarray
    link: np.ndarray
    group: np.ndarray
    wire: np.ndarray
    queued_wire: np.ndarray
    link_wire: np.ndarray
    drawn: np.ndarray
    credit: np.ndarray
    node_lo: np.ndarray
    """Per cost group, where its nodes start in :attr:`nodes` (one more: the end)."""
    nodes: np.ndarray
    workers: int
    has_bucket: bool
    has_link_wire: bool


class State(NamedTuple):
    """The replay's state (see the module docstring)."""

    issue: np.ndarray
    end: np.ndarray
    held: np.ndarray
    start: np.ndarray
    """Per instance: the latest issue so far until it starts, then its start."""
    state: np.ndarray
    by: np.ndarray
    arrives: np.ndarray
    """Per started pair, its data's arrival."""
    arrival: np.ndarray
    """1 where a pair's data is on its way and its receive not issued."""
    missing: np.ndarray
    steps: np.ndarray
    latest: np.ndarray
    """Per instance, on its group's workers: the latest and second latest release so far
    on its queue (it included), and when its queue's bytes leave the link."""
    second: np.ndarray
    on_wire: np.ndarray
    lost: np.ndarray
    """[0]: the share of its bucket credit the collective started last went without."""
    busy: np.ndarray
    """Per link of one channel: when its wire is free."""
    waiting: np.ndarray
    """1 where a rank is parked (held for :attr:`blocked_on`, whose end is not known)."""
    after_head: np.ndarray
    """Per pair (from :attr:`Links.first_pair`): the first and last pair whose ready
    notice follows it, waiting; per waiting pair the next."""
    after_tail: np.ndarray
    after_next: np.ndarray
    clock: np.ndarray
    blocked_on: np.ndarray
    at: np.ndarray
    """Per rank, its next mark."""
    ready: np.ndarray
    resume: np.ndarray
    counts: np.ndarray


@entry
def run(o: Ops, s: State, L: Links, B: Buckets) -> int:
    """Replay: run the ranks, and when none can go on, finish the first message to end
    on a shared link. The first rank left waiting (deadlocked), -1 for none (-2: a rank
    was held for another's op)."""
    run_ranks(o, s, L, B)
    while settle(o, s, L, B):
        run_ranks(o, s, L, B)
    if s.counts[FOREIGN]:
        return -2
    for r in range(s.blocked_on.size):
        if s.blocked_on[r] != NO_EVENT:
            return r
    return -1


@inline
def ended(o: Ops, s: State, e: int, t: float) -> None:
    """Event ``e``'s op ended at ``t``: the rank held for it may go on."""
    s.end[e] = t
    r = index(o.owner[e])
    if s.waiting[r] and s.blocked_on[r] == e:
        s.waiting[r] = 0
        s.ready[s.counts[READY]] = r
        s.counts[READY] += 1


@kernel
def run_ranks(o: Ops, s: State, L: Links, B: Buckets) -> None:
    """Run each rank ready to go on through its marks until it must wait for an op not
    ended yet, until none is ready."""
    issue, end, held, inst_of = s.issue, s.end, s.held, o.inst_of
    while s.counts[READY]:
        s.counts[READY] -= 1
        r = index(s.ready[s.counts[READY]])
        t, e = s.clock[r], s.blocked_on[r]
        if e != NO_EVENT:  # the op it was held for has ended
            if end[e] > t:
                held[e] = end[e] - t
                t = end[e]
            s.blocked_on[r] = NO_EVENT
        m, hi = s.at[r], o.mark_lo[r + 1]
        while m < hi:
            mark, a = o.kinds[m], index(o.args[m])
            t += o.gaps[m]
            m += 1
            if mark == ISSUE or mark == BLOCK:  # an issue: ISSUE goes on, BLOCK waits
                issue[a] = t
                j = index(inst_of[a])
                if o.send_of[j] == NO_EVENT:  # a collective: started by its last member
                    if t >= s.start[j]:
                        s.start[j] = t
                        s.by[j] = a
                    s.missing[j] -= 1
                    if not s.missing[j] and (o.head[j] or s.state[j - 1]):
                        begin_collectives(o, s, L, B, j)
                else:
                    issued_pair(o, s, L, B, a, j, t)
                if mark == ISSUE:
                    continue
            elif mark == STEP:
                s.steps[a] = t
                continue
            t_end = end[a]  # a BLOCK or HOLD: wait for the op to end
            if t_end == NOT_YET:  # parked until it ends
                s.waiting[r] = 1
                s.blocked_on[r] = a
                if o.owner[a] != r:  # only a rank's own ops hold it
                    s.counts[FOREIGN] = 1
                break
            if t_end > t:
                held[a] = t_end - t
                t = t_end
        s.at[r] = m
        s.clock[r] = t


@inline
def issued_pair(o: Ops, s: State, L: Links, B: Buckets, a: int, j: int, t: float) -> None:
    """Event ``a``, a send or receive of pair ``j``, was issued at ``t``: start the
    pair if it can."""
    send = index(o.send_of[j])
    go = False
    if o.meets[j]:  # a rendezvous: the later of its send and receive starts it
        if t >= s.start[j]:
            s.start[j], s.by[j] = t, a
        other = index(o.recv_of[j]) if a == send else send
        go = s.issue[other] != NOT_YET and (o.first[j] or s.state[j - 1])
    elif a == send:  # an eager send starts its pair
        s.start[j], s.by[j] = t, a
        go = o.first[j] or s.state[j - 1]
    elif s.arrival[j]:  # a receive whose data is on its way
        s.arrival[j] = 0
        ended(o, s, a, larger(t, s.arrives[j]))
    if go:
        begin_pairs(o, s, L, B, j)


@inline
def worker_start(o: Ops, s: State, L: Links, B: Buckets, i: int) -> tuple[float, float]:
    """Start collective ``i`` once one of its group's workers is free: (when, the
    earliest its members may end: once its bytes crossed the link); ``lost[0]``, the
    share of its bucket credit it went without."""
    t, how = s.start[i], STARTED
    head = o.head[i]
    ahead, low = (0.0, 0.0) if head else (s.latest[i - 1], s.second[i - 1])
    if low > t:
        t, how = low, QUEUED
    s.start[i], s.state[i] = t, how
    sent = 0.0 if head else s.on_wire[i - 1]  # when the bytes ahead of its own leave
    wire, release = o.wire[i], o.free_after[i]
    lost = 0.0
    if not o.has_bucket:
        # its bytes after the other's (the bucket not refilled), or its own from an idle link
        floor = sent + o.queued_wire[i] if sent > t else t + wire
    else:  # its bytes after the other's, with what the buckets hold then
        leave = sent if sent > t else t
        g = index(o.group[i])
        lost = draw(B, o.nodes, o.node_lo[g], o.node_lo[g + 1], leave, o.drawn[i], o.credit[i])
        if lost:
            wire += lost * o.credit[i]
            release += lost * (o.free_drained[i] - release)
        floor = leave + wire
    s.lost[0] = lost
    s.on_wire[i] = larger(larger(sent, floor), t + larger(wire, release))
    free = larger(t + release, floor)
    if ahead > free:
        s.latest[i], s.second[i] = ahead, larger(low, free)
    else:
        s.latest[i], s.second[i] = free, ahead
    return t, floor


@inline
def begin_collectives(o: Ops, s: State, L: Links, B: Buckets, i: int) -> None:
    """Start collective ``i`` and any that waited behind it on its group."""
    d = o.duration
    while True:
        if o.workers > 1:
            t, floor = worker_start(o, s, L, B, i)
            lost = s.lost[0]
        else:  # once its queue is free
            t, how, floor, lost = s.start[i], STARTED, 0.0, 0.0
            if not o.head[i]:
                free = s.start[i - 1] + o.free_after[i - 1]
                if free > t:
                    t, how = free, QUEUED
            s.start[i], s.state[i] = t, how
        for x in range(o.offsets[i], o.offsets[i + 1]):
            e = index(o.members[x])
            t_end = t + d[e] + lost * (o.drained[e] - d[e]) if lost else t + d[e]
            t_end = t_end if t_end >= floor else floor
            ended(o, s, e, t_end)
        i += 1
        if i >= s.start.size or o.head[i] or s.missing[i] or s.state[i]:
            return


@kernel
def begin_pairs(o: Ops, s: State, L: Links, B: Buckets, i: int) -> None:
    """Start pair ``i`` and any that waited behind it on its channel, or for it."""
    s.resume[0] = i
    s.counts[RESUME] = 1
    while s.counts[RESUME]:
        s.counts[RESUME] -= 1
        i = s.resume[s.counts[RESUME]]
        while begin_pair(o, s, L, B, i):
            i += 1
            if not can_follow(o, s, i):
                break


@kernel
def can_follow(o: Ops, s: State, i: int) -> bool:
    """Whether pair ``i`` can start now that the one ahead on its channel has."""
    if i >= s.start.size or o.first[i] or s.state[i]:
        return False
    if s.issue[o.send_of[i]] == NOT_YET:
        return False
    return not (o.meets[i] and s.issue[o.recv_of[i]] == NOT_YET)


@kernel
def wait_after(s: State, L: Links, j: int, i: int) -> None:
    """Pair ``i`` waits for pair ``j`` (its ready notice follows ``j``'s data)."""
    jj, ii = j - L.first_pair, i - L.first_pair
    s.after_next[ii] = NO_EVENT
    if s.after_head[jj] == NO_EVENT:
        s.after_head[jj] = i
    else:
        s.after_next[s.after_tail[jj] - L.first_pair] = i
    s.after_tail[jj] = i


@kernel
def take_after(s: State, L: Links, j: int) -> int:
    """The first of the pairs that waited for pair ``j`` (the others follow through
    ``after_next``), no longer waiting; -1 for none."""
    jj = j - L.first_pair
    if jj < 0 or jj >= s.after_head.size:  # none can wait (no pair has a notice to follow)
        return NO_EVENT
    i = s.after_head[jj]
    s.after_head[jj] = NO_EVENT
    return index(i)


@inline
def begin_pair(o: Ops, s: State, L: Links, B: Buckets, i: int) -> bool:
    """Start pair ``i``, its send's end and its data's arrival, and put the pairs that
    waited for it on the pairs to resume; False where it waits for the message back
    that its ready notice follows."""
    j, arrives = index(o.reverse[i]), s.arrives
    if j != NO_EVENT and s.state[j] == PENDING:  # the message back has not started
        if o.behind[i]:  # in the capture the notice followed it: wait for it
            wait_after(s, L, j, i)
            return False
    elif j != NO_EVENT:  # its ready notice follows j's data if that was on its way
        issue = s.issue
        posted = issue[o.recv_of[i]]
        back_sent, back_posted = issue[o.send_of[j]], issue[o.recv_of[j]]
        on_its_way = back_sent <= posted and back_posted < posted < arrives[j]
        if posted != NOT_YET and on_its_way and arrives[j] > s.start[i]:
            if arrives[j] == NOT_YET:  # j crosses a shared link: once it has arrived
                wait_after(s, L, j, i)
                return False
            s.start[i] = arrives[j]
    t, how = s.start[i], STARTED  # once its queue is free
    if not o.first[i]:
        free = s.start[i - 1] + o.free_after[i - 1]
        if free > t:
            t, how = free, QUEUED
    s.start[i], s.state[i] = t, how
    send = index(o.send_of[i])
    ended(o, s, send, t + o.duration[send])  # once its bytes are in the socket
    k = index(o.link[i])
    if k != NO_EVENT and L.shared[k]:  # it arrives once the link has served it
        wire, credit = wire_of(o, i)
        join(L, k, t, index(o.group[i]), i, wire, credit)
        due(L, B, k)
    elif k != NO_EVENT:  # a link of one channel: its wire after the message ahead's
        t = larger(t, s.busy[k])
        lost = pair_draw(o, B, i, t)
        wire, credit = wire_of(o, i)
        s.busy[k] = t + wire - (1.0 - lost) * credit
        landed(o, s, i, t + took(o, i, lost))
    else:
        landed(o, s, i, t + took(o, i, pair_draw(o, B, i, t)))
    p = take_after(s, L, i)
    while p != NO_EVENT:
        s.resume[s.counts[RESUME]] = p
        s.counts[RESUME] += 1
        p = index(s.after_next[p - L.first_pair])
    return True


@kernel
def pair_draw(o: Ops, B: Buckets, i: int, t: float) -> float:
    """Pair ``i``'s bytes leave from ``t``: the share of its bucket credit it goes
    without (0 without buckets)."""
    if not o.has_bucket:
        return 0.0
    g = index(o.group[i])
    return draw(B, o.nodes, o.node_lo[g], o.node_lo[g + 1], t, o.drawn[i], o.credit[i])


@kernel
def wire_of(o: Ops, i: int) -> tuple[float, float]:
    """Pair ``i``'s seconds of wire on its link and what a full bucket saves it."""
    if o.has_bucket:
        return o.drawn[i], o.credit[i]
    if o.has_link_wire:
        return o.link_wire[i], 0.0
    return (o.wire[i] if o.wire.size else o.free_after[i]), 0.0


@kernel
def took(o: Ops, i: int, lost: float) -> float:
    """Seconds pair ``i``'s data takes alone on an idle link, from its start, with the
    share ``lost`` of its bucket credit gone without."""
    r = index(o.recv_of[i])
    alone = o.duration[r]
    return alone + lost * (o.drained[r] - alone) if lost else alone


@inline
def landed(o: Ops, s: State, i: int, t: float) -> None:
    """Pair ``i``'s data arrived at ``t``: its receive ends (once issued)."""
    s.arrives[i] = t
    r = index(o.recv_of[i])
    if s.issue[r] != NOT_YET:
        ended(o, s, r, larger(s.issue[r], t))
    else:
        s.arrival[i] = 1


@kernel
def settle(o: Ops, s: State, L: Links, B: Buckets) -> bool:
    """Finish the message that ends first on the shared links (False: none is on one):
    its pair's data arrived, and the pairs that waited for that go on."""
    k = pop_due(L, B)
    if k == NO_EVENT:
        return False
    done = serve(L, B, k, True)
    for x in range(L.counts[FINISHED]):
        i = index(L.finished[x])
        joined, got = L.got_t[i - L.first_pair], L.got[i - L.first_pair]
        wire, credit = wire_of(o, i)
        if B.on:
            bucket_add(B, k, joined, wire, done)
        lost = 1.0 - got / credit if credit > 0.0 else 0.0
        landed(o, s, i, done - (wire - got) + took(o, i, lost))
        p = take_after(s, L, i)
        while p != NO_EVENT:
            nxt = index(s.after_next[p - L.first_pair])
            begin_pairs(o, s, L, B, p)
            p = nxt
    due(L, B, k)
    return True
