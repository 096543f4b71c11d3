"""The discrete-event replay of a :class:`~commlens.whatif.model.Program`.

Each rank runs through its marks, spending each compute gap as measured. A
collective starts when its last member issued it and the instance before it
on its group has released the queue; member ``e`` ends ``duration[e]``
seconds later. A p2p pair starts when its send was issued (a rendezvous: and
its receive, and the message its receiver's ready notice follows has
arrived: :attr:`~commlens.whatif.model.Program.behind`) and the pair before
it on its channel has ended; its send ends ``duration[send]`` later, its
receive ``duration[recv]`` after the start, or when it is issued if that is
later. A rank at a ``HOLD`` waits until that end; one that reaches an op
whose end is not known yet is parked and resumed when it is. Ranks advance
as far as they can before another is taken, so every mark is handled once:
the replay is linear in the number of marks.

Where the op times say how the ops hold the links
(:class:`~commlens.whatif.optimes.LinkUse`, gloo):

- up to ``workers`` collectives of one group run at once: one starts when a
  worker is free (the second latest release ahead of it on its queue, with
  two). Its bytes hold the link from its start until the later of its wire
  time and its release; one that starts while the bytes ahead of it on its
  queue are on the link sends its own after theirs, without the bucket's
  credit (``queued_wire``), and its members end no earlier than that; from
  an idle link, no earlier than its start plus its wire time;
- a message that crosses a node's link (``links``) crosses when no other is
  on it (:class:`LinkQueue`); its send, whose bytes went into the socket,
  ends without that wait.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from commlens.errors import RunFormatError
from commlens.whatif.model import BLOCK, ISSUE, STEP, Program, seconds
from commlens.whatif.optimes import Bucket, OpTimes

NOT_YET = math.inf
"""The time of what has not happened yet in the replay (an issue, an end, an arrival)."""
NO_EVENT = -1
"""In place of an event or instance index: none."""


class Start(IntEnum):
    """Where an instance stands in the replay."""

    PENDING = 0
    """Not started: a member has not issued it yet, or the one ahead has not started."""
    STARTED = 1
    """Started when its last member issued it (a pair: when it could meet)."""
    QUEUED = 2
    """Started later than that: behind its queue's previous instance (or for a worker)."""


PENDING, STARTED, QUEUED = Start.PENDING.value, Start.STARTED.value, Start.QUEUED.value


@dataclass
class Timeline:
    """Replayed times, in seconds from the program's time 0."""

    issue: np.ndarray
    """When each event was issued."""
    end: np.ndarray
    """When each event's op ended for its rank."""
    held: np.ndarray
    """How long the rank was held at the event's HOLD mark."""
    start: np.ndarray
    """When each instance started (a p2p pair: when its message started)."""
    by: np.ndarray
    """The event whose issue came last in each instance (its send for an eager pair)."""
    queued: np.ndarray
    """True where an instance started late because its queue's previous one was running."""
    step_marks: np.ndarray
    """Times of the step marks: slot 2·row is the start of step row ``row``, 2·row + 1 its end."""


@dataclass
class LinkQueue:
    """A node's link, which carries one message at a time: the messages put on it, in
    time order."""

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def cross(self, t: float, busy: float) -> float:
        """Put a message ready at ``t`` that holds the link ``busy`` seconds on it: when it
        crosses. One on the link at ``t`` goes first; so does one that starts while this
        one would be on it, put on the link already (the replay reaches the ranks' sends
        out of time order: of two that would overlap, the first reached goes first)."""
        starts, ends = self.starts, self.ends
        while True:
            at = bisect_right(starts, t)
            if at and t < ends[at - 1]:
                t = ends[at - 1]
            elif at < len(starts) and starts[at] < t + busy:
                t = ends[at]
            else:
                break
        starts.insert(at, t)
        ends.insert(at, t + busy)
        self.last = at
        return t

    last: int = 0
    """Where the message put on the link last stands in :attr:`starts`."""


LOOK_BACK = 64
"""Draws a bucket's level is found from at most (before them, it is taken as full)."""


@dataclass
class BucketLog:
    """A node's token bucket: the draws on it, in the order of their bytes' leaving.

    The replay reaches the ranks' ops out of time order, so a draw can come after
    one that leaves later; the level an op finds is that of the draws that left
    before it only (one kept as levels in the order reached took a later op's
    draw as made before: an op found the bucket empty that was full then)."""

    leaves: list[float] = field(default_factory=list)
    drawn: list[float] = field(default_factory=list)
    """Per draw, seconds of wire it took."""
    outs: list[float] = field(default_factory=list)
    """Per draw, when its bytes had left (the bucket refills from then)."""

    def level(self, t: float, capacity: float) -> float:
        """Seconds of wire the bucket holds at ``t``: full at first, drained by each draw
        that left before ``t``, refilled at one second a second once its bytes left."""
        leaves, drawn, outs = self.leaves, self.drawn, self.outs
        at = bisect_right(leaves, t)
        k, low = at, max(at - LOOK_BACK, 0)
        while k > low:  # back to a draw that found the bucket full (idle long enough)
            k -= 1
            if k == 0 or leaves[k] - outs[k - 1] >= capacity:
                break
        level, since = capacity, -math.inf
        for j in range(k, at):
            level = max(min(capacity, level + max(leaves[j] - since, 0.0)) - drawn[j], 0.0)
            since = max(since, outs[j])
        return min(capacity, level + max(t - since, 0.0))

    def add(self, t: float, drawn: float, out: float) -> None:
        """A draw of ``drawn`` seconds of wire leaving at ``t``, its bytes gone at ``out``."""
        at = bisect_right(self.leaves, t)
        self.leaves.insert(at, t)
        self.drawn.insert(at, drawn)
        self.outs.insert(at, out)


def replay(prog: Program, times: OpTimes) -> Timeline:
    """Replay ``prog`` with ``times`` (see the module docstring)."""
    run = _Replay(prog, times)
    run.run_ranks()
    stuck = [r for r, e in enumerate(run.blocked_on) if e != NO_EVENT]
    if stuck:
        raise RunFormatError(
            f"{prog.trace.name}: the replay deadlocked with rank {stuck[0]} waiting "
            "(ops the capture saw complete depend on ops issued later); the run's "
            "event order is inconsistent"
        )
    return Timeline(
        issue=np.frombuffer(run.issue, dtype=np.float64),
        end=np.frombuffer(run.end, dtype=np.float64),
        held=np.frombuffer(run.held, dtype=np.float64),
        start=np.frombuffer(run.start, dtype=np.float64),
        by=np.frombuffer(run.by, dtype=np.int32),
        queued=np.frombuffer(run.state, dtype=np.int8) == QUEUED,
        step_marks=np.frombuffer(run.steps, dtype=np.float64),
    )


class _Replay:
    """The state of one replay: per event its issue and end, per instance its start and
    :class:`Start`, per rank its clock and the event it is held for."""

    def __init__(self, prog: Program, times: OpTimes) -> None:
        n_ev, n_inst = prog.inst.size, prog.instances
        lists = prog.as_lists
        self.inst_of, self.members, self.offsets = lists["inst"], lists["members"], lists["offsets"]
        self.first, self.send_of = lists["first_of_queue"], lists["send_of"]
        self.recv_of, self.meets = lists["recv_of"], lists["rendezvous"]
        self.reverse, self.behind = lists["reverse"], lists["behind"]
        self.duration = seconds(times.duration)
        self.free_after = seconds(times.releases(prog))
        use = times.use
        self.workers = use.workers if use is not None else 1
        # with several workers, an instance that ran apart from the one ahead of it in the
        # capture still shares the workers with it: only a group's first has none ahead
        self.head = lists["opens_queue"] if self.workers > 1 else self.first
        links = use.links if use is not None else None
        self.link = (
            array("i", [NO_EVENT]) * n_inst if links is None else array("i", links.tobytes())
        )
        self.on_link: dict[int, LinkQueue] = defaultdict(LinkQueue)
        pool = n_inst if self.workers > 1 else 0
        wire = use.wire if use is not None and use.wire is not None else np.zeros(pool)
        self.wire = seconds(wire)
        queued = use.queued_wire if use is not None else None
        self.queued_wire = self.wire if queued is None else seconds(queued)
        # per instance, on its group's workers: the latest and second latest release so
        # far on its queue (it included), and when its queue's bytes leave the link
        self.bucket = use.bucket if use is not None else None
        if self.bucket is not None:
            self.setup_bucket(prog, times, self.bucket)
        self.latest = array("d", [0.0]) * pool
        self.second = array("d", [0.0]) * pool
        self.on_wire = array("d", [0.0]) * pool
        self.issue = array("d", [NOT_YET]) * n_ev
        self.end = array("d", [NOT_YET]) * n_ev
        self.held = array("d", [0.0]) * n_ev
        self.missing = array("i", np.diff(prog.offsets).astype(np.int32).tobytes())
        # per instance: the latest issue so far until it starts, then its start
        self.start = array("d", [0.0]) * n_inst
        self.state = array("b", [PENDING]) * n_inst
        self.by = array("i", [NO_EVENT]) * n_inst
        self.arrives = array("d", [NOT_YET]) * n_inst  # per started pair, its data's arrival
        self.arrival: dict[int, float] = {}  # pairs whose data is on its way, receive not issued
        self.after: dict[int, list[int]] = {}  # pairs whose ready notice follows a pair not started
        self.steps = array("d", [NOT_YET]) * (2 * prog.trace.step_rank.size)
        self.parked: dict[int, list[int]] = {}  # event -> ranks held until it ends
        n_ranks = len(prog.mark_types)
        self.marks = [
            iter(zip(k, a, g, strict=True))
            for k, a, g in zip(prog.mark_types, prog.args, prog.gaps, strict=True)
        ]
        self.clock = [0.0] * n_ranks
        self.blocked_on = [NO_EVENT] * n_ranks
        self.ready = list(range(n_ranks - 1, -1, -1))
        self.n_inst = n_inst
        self.lost = 0.0  # the share of its bucket credit the collective started last went without

    def setup_bucket(self, prog: Program, times: OpTimes, bucket: Bucket) -> None:
        """The state of the links' buckets: each full at time 0."""
        self.drawn, self.credit = seconds(bucket.drawn), seconds(bucket.credit)
        self.nodes, self.capacity = bucket.nodes, bucket.capacity_s
        self.group_of = array("i", prog.inst_group.astype(np.int32).tobytes())
        n_nodes = 1 + max((n for g in bucket.nodes for n in g), default=0)
        self.buckets = [BucketLog() for _ in range(n_nodes)]
        drained = times.duration if times.drained is None else times.drained
        self.drained = seconds(drained)
        self.free_drained = seconds(times.releases(prog, drained=True))

    def draw(self, i: int, t: float) -> float:
        """Instance ``i``'s bytes leave from ``t``: take them from its nodes' buckets. What
        share of a full bucket's credit it goes without (0: full, 1: empty)."""
        credit = self.credit[i]
        if credit <= 0.0:
            return 0.0
        logs = [self.buckets[n] for n in self.nodes[self.group_of[i]]]
        got = min(min(log.level(t, self.capacity) for log in logs), credit)
        drawn = self.drawn[i]
        out = t + drawn - got  # when its bytes have left, the buckets empty or what is left
        for log in logs:
            log.add(t, drawn, out)
        return 1.0 - got / credit

    def ended(self, e: int, t: float) -> None:
        """Event ``e``'s op ended at ``t``: the ranks held for it may go on."""
        self.end[e] = t
        waiting = self.parked.pop(e, None)
        if waiting:
            self.ready.extend(waiting)

    def run_ranks(self) -> None:
        """Run each rank ready to go on through its marks until it must wait for an op not
        ended yet, until none is ready."""
        end, held, issue, inst_of = self.end, self.held, self.issue, self.inst_of
        send_of, start, by, missing = self.send_of, self.start, self.by, self.missing
        head, state, steps, marks = self.head, self.state, self.steps, self.marks
        clock, blocked_on, parked, ready = self.clock, self.blocked_on, self.parked, self.ready
        issues, step, none, not_yet = (ISSUE, BLOCK), STEP, NO_EVENT, NOT_YET  # as locals
        while ready:
            r = ready.pop()
            t, e = clock[r], blocked_on[r]
            if e != none:  # the op it was held for has ended
                if end[e] > t:
                    held[e] = end[e] - t
                    t = end[e]
                blocked_on[r] = none
            for mark, a, gap in marks[r]:
                t += gap
                if mark in issues:  # an issue: ISSUE goes on, BLOCK waits
                    issue[a] = t
                    j = inst_of[a]
                    if send_of[j] == none:  # a collective: started by its last member
                        if t >= start[j]:
                            start[j] = t
                            by[j] = a
                        missing[j] -= 1
                        if not missing[j] and (head[j] or state[j - 1]):
                            self.begin_collectives(j)
                    else:
                        self.issued_pair(a, j, t)
                    if mark == issues[0]:
                        continue
                elif mark == step:
                    steps[a] = t
                    continue
                t_end = end[a]  # a BLOCK or HOLD: wait for the op to end
                if t_end == not_yet:
                    parked.setdefault(a, []).append(r)
                    blocked_on[r] = a
                    break
                if t_end > t:
                    held[a] = t_end - t
                    t = t_end
            clock[r] = t

    def issued_pair(self, a: int, j: int, t: float) -> None:
        """Event ``a``, a send or receive of pair ``j``, was issued at ``t``: start the
        pair if it can."""
        start, state, send = self.start, self.state, self.send_of[j]
        if self.meets[j]:  # a rendezvous: the later of its send and receive starts it
            if t >= start[j]:
                start[j], self.by[j] = t, a
            other = self.recv_of[j] if a == send else send
            if self.issue[other] != NOT_YET and (self.first[j] or state[j - 1]):
                self.begin_pairs(j)
        elif a == send:  # an eager send starts its pair
            start[j], self.by[j] = t, a
            if self.first[j] or state[j - 1]:
                self.begin_pairs(j)
        elif j in self.arrival:  # a receive whose data is on its way
            self.ended(a, max(t, self.arrival.pop(j)))

    def queue_start(self, i: int) -> float:
        """Start instance ``i`` (issued by all its members) once its queue is free: when."""
        t, how = self.start[i], STARTED
        if not self.first[i]:
            free = self.start[i - 1] + self.free_after[i - 1]
            if free > t:
                t, how = free, QUEUED
        self.start[i], self.state[i] = t, how
        return t

    def worker_start(self, i: int) -> tuple[float, float]:
        """Start collective ``i`` once one of its group's workers is free: (when, the
        earliest its members may end: once its bytes crossed the link); :attr:`lost`, the
        share of its bucket credit it went without."""
        t, how = self.start[i], STARTED
        head = self.head[i]
        ahead, low = (0.0, 0.0) if head else (self.latest[i - 1], self.second[i - 1])
        if low > t:
            t, how = low, QUEUED
        self.start[i], self.state[i] = t, how
        sent = 0.0 if head else self.on_wire[i - 1]  # when the bytes ahead of its own leave
        wire: float = self.wire[i]
        release: float = self.free_after[i]
        lost = 0.0
        if self.bucket is None:
            # its bytes after the other's (the bucket not refilled), or its own from an idle link
            floor = sent + self.queued_wire[i] if sent > t else t + wire
        else:  # its bytes after the other's, with what the buckets hold then
            leave = sent if sent > t else t
            lost = self.draw(i, leave)
            if lost:
                wire += lost * self.credit[i]
                release += lost * (self.free_drained[i] - release)
            floor = leave + wire
        self.lost = lost
        self.on_wire[i] = max(sent, floor, t + max(wire, release))
        free = max(t + release, floor)
        self.latest[i], self.second[i] = (ahead, max(low, free)) if ahead > free else (free, ahead)
        return t, floor

    def begin_collectives(self, i: int) -> None:
        """Start collective ``i`` and any that waited behind it on its group."""
        members, offsets, d, end = self.members, self.offsets, self.duration, self.end
        head, missing, state, parked = self.head, self.missing, self.state, self.parked
        on_workers, n_inst = self.workers > 1, self.n_inst
        start, free_after = self.start, self.free_after
        while True:
            if on_workers:
                t, floor = self.worker_start(i)
                lost = self.lost
            else:  # once its queue is free (queue_start, inline: the replay's hot path)
                t, how, floor, lost = start[i], STARTED, 0.0, 0.0
                if not head[i]:
                    free = start[i - 1] + free_after[i - 1]
                    if free > t:
                        t, how = free, QUEUED
                start[i], state[i] = t, how
            for e in members[offsets[i] : offsets[i + 1]]:
                t_end = t + d[e] + lost * (self.drained[e] - d[e]) if lost else t + d[e]
                end[e] = t_end if t_end >= floor else floor
                if parked:
                    waiting = parked.pop(e, None)
                    if waiting:
                        self.ready.extend(waiting)
            i += 1
            if i >= n_inst or head[i] or missing[i] or state[i]:
                return

    def begin_pairs(self, i: int) -> None:
        """Start pair ``i`` and any that waited behind it on its channel, or for it."""
        resume = [i]
        while resume:
            i = resume.pop()
            while self.begin_pair(i, resume):
                i += 1
                if not self.can_follow(i):
                    break

    def can_follow(self, i: int) -> bool:
        """Whether pair ``i`` can start now that the one ahead on its channel has."""
        if i >= self.n_inst or self.first[i] or self.state[i]:
            return False
        if self.issue[self.send_of[i]] == NOT_YET:
            return False
        return not (self.meets[i] and self.issue[self.recv_of[i]] == NOT_YET)

    def begin_pair(self, i: int, resume: list[int]) -> bool:
        """Start pair ``i``, its send's end and its data's arrival, and put the pairs that
        waited for it on ``resume``; False where it waits for the message back that its
        ready notice follows."""
        j, arrives = self.reverse[i], self.arrives
        if j != NO_EVENT and self.state[j] == PENDING:  # the message back has not started
            if self.behind[i]:  # in the capture the notice followed it: wait for it
                self.after.setdefault(j, []).append(i)
                return False
        elif j != NO_EVENT:  # its ready notice follows j's data if that was on its way
            issue = self.issue
            posted = issue[self.recv_of[i]]
            back_sent, back_posted = issue[self.send_of[j]], issue[self.recv_of[j]]
            on_its_way = back_sent <= posted and back_posted < posted < arrives[j]
            if posted != NOT_YET and on_its_way and arrives[j] > self.start[i]:
                self.start[i] = arrives[j]
        t = self.queue_start(i)
        s, r = self.send_of[i], self.recv_of[i]
        self.ended(s, t + self.duration[s])  # once its bytes are in the socket
        k = self.link[i]
        took: float = self.duration[r]
        if k != NO_EVENT:  # it crosses the node's link when no other message is on it
            t = self.start[i] = self.on_link[k].cross(t, self.free_after[i])
        if self.bucket is not None:
            lost = self.draw(i, t)
            if lost:
                took += lost * (self.drained[r] - took)
                if k != NO_EVENT:
                    busy = self.free_after[i] + lost * (self.free_drained[i] - self.free_after[i])
                    queue = self.on_link[k]
                    queue.ends[queue.last] = t + busy
        arrives[i] = t + took
        if self.issue[r] != NOT_YET:
            self.ended(r, max(self.issue[r], arrives[i]))
        else:
            self.arrival[i] = arrives[i]
        if self.after:
            resume.extend(self.after.pop(i, ()))
        return True
