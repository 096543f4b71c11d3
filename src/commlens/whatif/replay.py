"""The discrete-event replay of a :class:`~commlens.whatif.model.Program`.

Each rank runs through its marks, spending each compute gap as measured. A
collective starts when its last member issued it and the instance before it
on its group has released the queue; member ``e`` ends ``dur[e]`` seconds
later. A p2p pair starts when its send was issued (a rendezvous: and its
receive, and the message its receiver's ready notice follows has arrived:
:attr:`~commlens.whatif.model.Program.behind`) and the pair before it on its
channel has ended; its send ends
``dur[send]`` later, its receive ``dur[recv]`` after the start, or when it is
issued if that is later. A rank at a ``HOLD`` waits until that
end; one that reaches an op whose end is not known yet is parked and resumed
when it is. Ranks advance as far as they can before another is taken, so
every mark is handled once: the replay is linear in the number of marks.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from commlens.errors import RunFormatError
from commlens.whatif.model import Program, seconds


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


def replay(
    prog: Program,
    dur: np.ndarray,
    release: np.ndarray | None = None,
    links: np.ndarray | None = None,
    workers: int = 1,
    wire: np.ndarray | None = None,
    queued_wire: np.ndarray | None = None,
) -> Timeline:
    """Replay ``prog`` with member ``e`` of an instance lasting ``dur[e]`` seconds.

    The next op on an instance's queue may start ``release[i]`` seconds after
    instance ``i`` started (default: when its last member ends; a send: when it
    and its receive's data have ended, the channel carries one message at a time).
    A p2p pair ``i`` with ``links[i] >= 0`` crosses that link, which carries one
    message at a time: one that starts while another is on its link starts when that
    one frees it (:func:`~commlens.whatif.durations.node_links`; of two messages that
    would overlap, the one the replay reached first goes first); its send, whose bytes went into
    the socket, ends ``dur[send]`` after the pair's start without that wait.

    ``workers`` (gloo: ``commlens.optable.GLOO.workers``) collectives
    of one group may run at once: one starts when a worker is free (the second
    latest release of the instances before it on its queue, with two). An
    instance that starts while the bytes of those before it on its queue are still
    on the link shares the link with them: its bytes follow theirs (each
    instance's bytes hold the link from its start until the later of ``wire[i]``,
    its wire time, and its release: a ring's next bytes wait for its host's work on
    the last ones, and the other op's bytes queue behind them on the same
    connections), so its members end no earlier than their bytes' end plus its own
    wire time there, ``queued_wire[i]`` (default ``wire[i]``: on a shaped link, its
    time without the bucket's credit, which the busy link did not refill); from an
    idle link, no earlier than its start plus ``wire[i]`` (a member whose fitted time
    is shorter, its lag behind the call's mean taken off, still waits for its bytes);
    its host work runs on its own worker, beside the other's. Until
    their wire time only, the DDP job's self-replays at 1 Gbit/s came out 9-20%
    short (the second bucket ended 4-10 ms early); until the release, within 9%.
    """
    if release is None:
        release = np.zeros(prog.instances)
        np.maximum.at(release, prog.inst, dur)
    free_after = seconds(release)
    n_ev, n_inst = prog.inst.size, prog.instances
    lists = prog.as_lists
    inst_of, members, offsets = lists["inst"], lists["members"], lists["offsets"]
    first, send_of, recv_of = lists["first_of_queue"], lists["send_of"], lists["recv_of"]
    meets, reverse, behind = lists["rendezvous"], lists["reverse"], lists["behind"]
    # with several workers, an instance that ran apart from the one ahead of it in the
    # capture still shares the workers with it: only a group's first has none ahead
    head = lists["opens_queue"] if workers > 1 else first
    link = array("i", [-1]) * n_inst if links is None else array("i", links.tobytes())
    on_link: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    """Per link, the starts of the messages put on it, in time order, and their ends."""
    d = seconds(dur)
    nan = array("d", [float("nan")])
    issue = nan * n_ev
    end = nan * n_ev
    held = array("d", [0.0]) * n_ev
    missing = array("i", np.diff(prog.offsets).astype(np.int32).tobytes())
    # Per instance: the latest issue so far until it starts, then its start; its
    # state 0 (not started), 1 (started) or 2 (started late, behind its queue's
    # previous one, which frees the queue at start[i - 1] + free_after[i - 1]).
    start = array("d", [0.0]) * n_inst
    state = array("b", [0]) * n_inst
    by = array("i", [-1]) * n_inst
    arrival: dict[int, float] = {}  # pairs whose data is on its way, receive not issued
    arrives = nan * n_inst  # per started pair, when its data arrives
    after: dict[int, list[int]] = {}  # pairs whose ready notice follows a pair not started
    steps = nan * (2 * prog.trace.step_rank.size)
    parked: dict[int, list[int]] = {}
    n_ranks = len(prog.kinds)
    marks = [
        iter(zip(k, a, g, strict=True))
        for k, a, g in zip(prog.kinds, prog.args, prog.gaps, strict=True)
    ]
    clock = [0.0] * n_ranks
    blocked_on = [-1] * n_ranks
    todo = list(range(n_ranks - 1, -1, -1))

    def ended(e: int, t: float) -> None:
        end[e] = t
        waiting = parked.pop(e, None)
        if waiting:
            todo.extend(waiting)

    def started(i: int) -> float:
        """Start instance ``i`` (issued by all its members) once its queue is free; when."""
        t, how = start[i], 1
        if not first[i]:
            free = start[i - 1] + free_after[i - 1]
            if free > t:
                t, how = free, 2
        start[i], state[i] = t, how
        return t

    # With several workers: per instance, the latest and second latest release so far
    # on its queue (it included).
    latest = array("d", [0.0]) * (n_inst if workers > 1 else 0)
    second = array("d", [0.0]) * (n_inst if workers > 1 else 0)
    on_wire = array("d", [0.0]) * (n_inst if workers > 1 else 0)  # when its queue's bytes end
    w = seconds(np.zeros(n_inst if workers > 1 else 0) if wire is None else wire)
    w_queued = w if queued_wire is None else seconds(queued_wire)

    def begin(i: int) -> None:
        """Start collective ``i`` and any that waited behind it on its group."""
        while True:
            if workers == 1:
                t, floor = started(i), 0.0
            else:  # when a worker is free; beside the one ahead if that still runs
                t, how = start[i], 1
                ahead, low = (0.0, 0.0) if head[i] else (latest[i - 1], second[i - 1])
                if low > t:
                    t, how = low, 2
                start[i], state[i] = t, how
                sent = 0.0 if head[i] else on_wire[i - 1]  # the bytes ahead of its own
                # its bytes after the other's, or its own from an idle link
                floor = sent + w_queued[i] if sent > t else t + w[i]
                on_wire[i] = max(sent, floor, t + max(w[i], free_after[i]))
                free = max(t + free_after[i], floor)
                latest[i], second[i] = (ahead, max(low, free)) if ahead > free else (free, ahead)
            for e in members[offsets[i] : offsets[i + 1]]:
                t_end = t + d[e]
                end[e] = t_end if t_end >= floor else floor
                if parked:
                    waiting = parked.pop(e, None)
                    if waiting:
                        todo.extend(waiting)
            i += 1
            if i >= n_inst or head[i] or missing[i] or state[i]:
                return

    def send(i: int) -> None:
        """Start pair ``i`` and any that waited behind it on its channel, or for it."""
        resume = [i]
        while resume:
            i = resume.pop()
            while True:
                j = reverse[i]
                if j >= 0 and not state[j]:  # the message back has not started yet
                    if behind[i]:  # in the capture the notice followed it: wait for it
                        after.setdefault(j, []).append(i)
                        break
                elif j >= 0:  # its ready notice follows j's data if that was on its way
                    posted, sj, rj = issue[recv_of[i]], send_of[j], recv_of[j]
                    if issue[sj] <= posted and issue[rj] < posted < arrives[j]:
                        if arrives[j] > start[i]:
                            start[i] = arrives[j]
                t = started(i)
                s, r = send_of[i], recv_of[i]
                ended(s, t + d[s])  # once its bytes are in the socket
                k = link[i]
                if k >= 0:  # it crosses the link when no other message is on it
                    starts, ends = on_link[k]
                    while True:
                        at = bisect_right(starts, t)
                        if at and t < ends[at - 1]:  # one that started before it goes first
                            t = ends[at - 1]
                        elif at < len(starts) and starts[at] < t + free_after[i]:
                            # one that started after it, put on the link already (the ranks
                            # reach their sends out of time order): this one goes after it
                            t = ends[at]
                        else:
                            break
                    start[i] = t
                    starts.insert(at, t)
                    ends.insert(at, t + free_after[i])
                arrives[i] = t + d[r]
                if issue[r] == issue[r]:
                    ended(r, max(issue[r], arrives[i]))
                else:
                    arrival[i] = arrives[i]
                if after:
                    resume.extend(after.pop(i, ()))
                i += 1
                if i >= n_inst or first[i] or state[i] or issue[send_of[i]] != issue[send_of[i]]:
                    break
                if meets[i] and issue[recv_of[i]] != issue[recv_of[i]]:
                    break

    while todo:
        r = todo.pop()
        t = clock[r]
        e = blocked_on[r]
        if e >= 0:  # the op it was held for has ended
            t_end = end[e]
            if t_end > t:
                held[e] = t_end - t
                t = t_end
            blocked_on[r] = -1
        for kind, a, gap in marks[r]:  # 0 ISSUE, 1 BLOCK, 2 HOLD, 3 STEP (see model)
            t += gap
            if kind < 2:  # an issue
                issue[a] = t
                j = inst_of[a]
                if send_of[j] < 0:  # a collective
                    if t >= start[j]:
                        start[j] = t
                        by[j] = a
                    missing[j] -= 1
                    if not missing[j] and (head[j] or state[j - 1]):
                        begin(j)
                elif meets[j]:  # a rendezvous: the later of its send and receive starts it
                    if t >= start[j]:
                        start[j] = t
                        by[j] = a
                    other = recv_of[j] if a == send_of[j] else send_of[j]
                    if issue[other] == issue[other] and (first[j] or state[j - 1]):
                        send(j)
                elif a == send_of[j]:
                    start[j] = t
                    by[j] = a
                    if first[j] or state[j - 1]:
                        send(j)
                elif j in arrival:  # a receive whose data is on its way
                    ended(a, max(t, arrival.pop(j)))
                if kind == 0:
                    continue
            elif kind == 3:
                steps[a] = t
                continue
            t_end = end[a]
            if t_end != t_end:  # not ended yet: park the rank
                parked.setdefault(a, []).append(r)
                blocked_on[r] = a
                break
            if t_end > t:
                held[a] = t_end - t
                t = t_end
        clock[r] = t
    stuck = [r for r in range(n_ranks) if blocked_on[r] >= 0]
    if stuck:
        raise RunFormatError(
            f"{prog.trace.name}: the replay deadlocked with rank {stuck[0]} waiting "
            "(ops the capture saw complete depend on ops issued later); the run's "
            "event order is inconsistent"
        )
    return Timeline(
        issue=np.frombuffer(issue, dtype=np.float64),
        end=np.frombuffer(end, dtype=np.float64),
        held=np.frombuffer(held, dtype=np.float64),
        start=np.frombuffer(start, dtype=np.float64),
        by=np.frombuffer(by, dtype=np.int32),
        queued=np.frombuffer(state, dtype=np.int8) == 2,
        step_marks=np.frombuffer(steps, dtype=np.float64),
    )
