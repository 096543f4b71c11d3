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
- a message that crosses a node's link (``links``) shares it with the messages
  of the other channels on it while they overlap, its rate and its bucket's
  credit (:class:`SharedLink`), and follows the messages of its own channel; its
  send, whose bytes went into the socket, ends without that wait.
"""

from __future__ import annotations

import heapq
import math
from array import array
from bisect import bisect_right, insort
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import takewhile

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


DONE_S = 1e-12
"""Seconds of wire a message may have left on a link and be done (float rounding)."""


Join = tuple[float, int, int, int, float, float]
"""A message put on a shared link: (when, order, channel, pair, wire, credit)."""


class SharedLink:
    """A node's link out that messages of several channels (sockets) cross: served as
    its shaper serves them.

    The shaper's queue is one FIFO of packets, and a message's bytes enter it at
    once (the veth's rate is many times the link's): the link carries the messages
    in the order they came, each at its full rate, and those that came at the same
    time side by side (their packets interleaved, sharing the rate); a channel's
    messages one after the other (one socket). A message is its wire time at the
    link's rate; the bucket's credit, what the node's bucket holds when the link
    goes busy (it refills only while the link idles), goes to the messages that
    cross first, split equally between those side by side, and crosses at once.

    The replay reaches the ranks out of time order, so a message's end is found only
    once no message can come on the link before it: :meth:`next_end` is when the
    first message on it would be done with the messages known so far, :meth:`finish`
    serves the link until then. The replay finishes the earliest of all links' next
    ends once no rank can go on (a rank goes on only from an end, so a message it
    puts on a link afterwards comes no earlier; one that comes earlier all the same,
    its pair started by a later end, comes at the link's time).
    """

    def __init__(self, log: BucketLog | None, capacity: float) -> None:
        self.log, self.capacity = log, capacity
        self.now = -math.inf
        self.tokens = 0.0
        """The bucket's credit left in the link's busy spell."""
        self.joins: list[Join] = []
        """Messages put on the link, in time order; those before :attr:`taken` are on it."""
        self.taken = 0
        self.line: list[Join] = []
        """Messages on the link behind those crossing, in order."""
        self.crossing: dict[int, float] = {}
        """Pairs crossing side by side, and seconds of their wire still to cross."""
        self.came = -math.inf
        """When the pairs crossing came on the link."""
        self.got: dict[int, tuple[float, float]] = {}
        """Per pair crossing, when it came on the link and the bucket's credit it took."""
        self.channels: dict[int, int] = {}
        """Per pair crossing, its channel."""
        self.count = 0
        self.version = 0
        """Counts the link's changes (an entry of the replay's queue of links is current
        only with the link's latest)."""

    def join(self, t: float, channel: int, i: int, wire: float, credit: float) -> None:
        """Pair ``i`` of ``channel`` comes on the link at ``t`` with ``wire`` seconds to
        cross, of which the bucket may save it ``credit``."""
        self.count += 1
        insort(self.joins, (max(t, self.now), self.count, channel, i, wire, credit), lo=self.taken)

    def next_end(self) -> float:
        """When the first message on the link is done, with the messages known so far."""
        return self._serve(False)[0]

    def finish(self) -> tuple[float, list[int]]:
        """Serve the link until its first message is done: when, and the pairs done."""
        return self._serve(True)

    def _serve(self, commit: bool) -> tuple[float, list[int]]:
        joins, crossing = self.joins, dict(self.crossing)
        now, tokens, k, came = self.now, self.tokens, self.taken, self.came
        behind: list[Join] = []
        while True:
            n = len(crossing)
            done = now + min(crossing.values()) * n if n else math.inf
            if k == len(joins):
                break
            t = max(joins[k][0], now)
            if t >= done:
                break
            if n and t > came:  # behind the messages crossing
                if not commit:
                    break
                behind.append(joins[k])
                k += 1
                continue
            if not n:  # an idle link (nothing behind): its bucket refilled meanwhile
                if self.log is not None:
                    tokens = self.log.level(t, self.capacity)
                now = came = t
            batch = []
            while k < len(joins) and max(joins[k][0], now) <= t:
                batch.append(joins[k])
                k += 1
            tokens = self._cross(batch, t, crossing, behind, tokens, commit)
        if not commit or done == math.inf:
            return done, []
        for i in crossing:
            crossing[i] -= (done - now) / len(crossing)
        first = min(crossing, key=crossing.__getitem__)
        finished = [i for i, left in crossing.items() if i == first or left <= DONE_S]
        for i in finished:
            del crossing[i], self.channels[i]
        for item in behind:
            insort(self.line, item)
        if not crossing and self.line:  # the messages next in line cross, from the busy link
            came = self.line[0][0]
            batch = list(takewhile(lambda item: item[0] == came, self.line))
            del self.line[: len(batch)]
            tokens = self._cross(batch, came, crossing, self.line, tokens, True)
        self.now, self.tokens, self.taken, self.came = done, tokens, k, came
        self.crossing = crossing
        if k > 256 and 2 * k > len(joins):
            del joins[:k]
            self.taken = 0
        return done, finished

    def _cross(
        self,
        batch: list[Join],
        t: float,
        crossing: dict[int, float],
        behind: list[Join],
        tokens: float,
        commit: bool,
    ) -> float:
        """The messages of ``batch``, which came at ``t``, cross beside ``crossing`` (a
        channel's second one behind, in ``behind``), taking the bucket's ``tokens``: what
        is left of them."""
        busy = set(self.channels.values())
        going: list[Join] = []
        for item in batch:
            c = item[2]
            if c in busy:
                if commit:
                    insort(behind, item)
                continue
            busy.add(c)
            going.append(item)
        shares = _water_fill(tokens, [item[5] for item in going])
        for (_, _, c, i, wire, _), got in zip(going, shares, strict=True):
            crossing[i] = wire - got
            if commit:
                self.got[i], self.channels[i] = (t, got), c
        return tokens - sum(shares)


def _water_fill(level: float, wants: list[float]) -> list[float]:
    """``level`` split equally between claims of at most ``wants`` each (what one does
    not take, the others may)."""
    out = [0.0] * len(wants)
    for n, j in enumerate(sorted(range(len(wants)), key=wants.__getitem__)):
        out[j] = min(wants[j], level / (len(wants) - n))
        level -= out[j]
    return out


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
    while run.settle():  # no rank can go on: the first message to end on a shared link
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
        self.shared = {} if links is None else self.shared_links(prog, links)
        link_wire = use.link_wire if use is not None else None
        self.link_wire = None if link_wire is None else seconds(link_wire)
        self.channel = array("i", prog.inst_group.astype(np.int32).tobytes())
        self.busy: dict[int, float] = {}  # a link of one channel: when its wire is free
        self.due: list[tuple[float, int, int]] = []  # (next end, version, link): shared links
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

    def shared_links(self, prog: Program, links: np.ndarray) -> dict[int, SharedLink]:
        """The links that messages of several channels cross (a link of one channel
        carries its messages one after the other, found as they come)."""
        pairs = np.flatnonzero(links >= 0)
        crossing = np.unique(np.stack([links[pairs], prog.inst_group[pairs]]), axis=1)
        k, n = np.unique(crossing[0], return_counts=True)
        logs = self.buckets if self.bucket is not None else None
        capacity = self.capacity if self.bucket is not None else 0.0
        return {
            int(k): SharedLink(None if logs is None else logs[int(k)], capacity)
            for k in k[n > 1].tolist()
        }

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
                if arrives[j] == NOT_YET:  # j crosses a shared link: once it has arrived
                    self.after.setdefault(j, []).append(i)
                    return False
                self.start[i] = arrives[j]
        t = self.queue_start(i)
        s = self.send_of[i]
        self.ended(s, t + self.duration[s])  # once its bytes are in the socket
        k = self.link[i]
        if k != NO_EVENT and k in self.shared:  # it arrives once the link has served it
            wire, credit = self.wire_of(i)
            self.shared[k].join(t, self.channel[i], i, wire, credit)
            self.due_link(k)
        elif k != NO_EVENT:  # a link of one channel: its wire after the message ahead's
            t = max(t, self.busy.get(k, t))
            lost = self.draw(i, t) if self.bucket is not None else 0.0
            wire, credit = self.wire_of(i)
            self.busy[k] = t + wire - (1.0 - lost) * credit
            self.landed(i, t + self.took(i, lost))
        else:
            self.landed(i, t + self.took(i, self.draw(i, t) if self.bucket is not None else 0.0))
        if self.after:
            resume.extend(self.after.pop(i, ()))
        return True

    def wire_of(self, i: int) -> tuple[float, float]:
        """Pair ``i``'s seconds of wire on its link and what a full bucket saves it."""
        if self.bucket is not None:
            return self.drawn[i], self.credit[i]
        if self.link_wire is not None:
            return self.link_wire[i], 0.0
        return (self.wire[i] if len(self.wire) else self.free_after[i]), 0.0

    def took(self, i: int, lost: float) -> float:
        """Seconds pair ``i``'s data takes alone on an idle link, from its start, with the
        share ``lost`` of its bucket credit gone without."""
        r = self.recv_of[i]
        took: float = self.duration[r]
        return took + lost * (self.drained[r] - took) if lost else took

    def landed(self, i: int, t: float) -> None:
        """Pair ``i``'s data arrived at ``t``: its receive ends (once issued)."""
        self.arrives[i] = t
        r = self.recv_of[i]
        if self.issue[r] != NOT_YET:
            self.ended(r, max(self.issue[r], t))
        else:
            self.arrival[i] = t

    def due_link(self, k: int) -> None:
        """Put shared link ``k`` on the replay's queue of links at its next end."""
        link = self.shared[k]
        link.version += 1
        t = link.next_end()
        if t != NOT_YET:
            heapq.heappush(self.due, (t, link.version, k))

    def settle(self) -> bool:
        """Finish the message that ends first on the shared links (False: none is on one):
        its pair's data arrived, and the pairs that waited for that go on."""
        due = self.due
        while due:
            t, version, k = heapq.heappop(due)
            link = self.shared[k]
            if version != link.version:
                continue
            if link.next_end() > t:  # a bucket drained since by a collective's bytes
                self.due_link(k)
                continue
            done, finished = link.finish()
            for i in finished:
                joined, got = link.got.pop(i)
                wire, credit = self.wire_of(i)
                if self.bucket is not None:
                    self.buckets[k].add(joined, wire, done)
                lost = 1.0 - got / credit if credit > 0.0 else 0.0
                self.landed(i, done - (wire - got) + self.took(i, lost))
                for p in self.after.pop(i, ()):
                    self.begin_pairs(p)
            self.due_link(k)
            return True
        return False
