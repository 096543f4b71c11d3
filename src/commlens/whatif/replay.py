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
  credit (:mod:`~commlens.whatif.links`), and follows the messages of its own channel; its
  send, whose bytes went into the socket, ends without that wait.

The replay runs compiled (:mod:`~commlens.whatif.engine`, on the program's and
the op times' arrays); this module lays those out and reads the answer back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commlens.errors import RunFormatError
from commlens.whatif.buckets import Buckets
from commlens.whatif.engine import NO_EVENT, NOT_YET, QUEUED, Ops, State, run
from commlens.whatif.links import Links
from commlens.whatif.model import Program
from commlens.whatif.optimes import OpTimes


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


def replay(prog: Program, times: OpTimes) -> Timeline:
    """Replay ``prog`` with ``times`` (see the module docstring)."""
    ops = _ops(prog, times)
    links = _links(prog, times)
    state = _state(prog, ops, links)
    stuck = run(ops, state, links, _buckets(prog, times, links))
    if stuck == -2:
        raise RuntimeError(f"{prog.trace.name}: a rank's marks name another rank's op")
    if stuck >= 0:
        raise RunFormatError(
            f"{prog.trace.name}: the replay deadlocked with rank {stuck} waiting "
            "(ops the capture saw complete depend on ops issued later); the run's "
            "event order is inconsistent"
        )
    return Timeline(
        issue=state.issue,
        end=state.end,
        held=state.held,
        start=state.start,
        by=state.by,
        queued=state.state == QUEUED,
        step_marks=state.steps,
    )


def _f64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


def _whole(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """The ranks' ``parts`` laid end to end: the array they are views of (the program's,
    :attr:`~commlens.whatif.model.Program.mark_types`), else a copy."""
    base = parts[0].base if parts else None
    if isinstance(base, np.ndarray) and base.dtype == dtype and base.ndim == 1:
        start = at = base.__array_interface__["data"][0]
        for part in parts:
            if part.base is not base or part.__array_interface__["data"][0] != at:
                break
            at += part.nbytes
        else:
            if at == start + base.nbytes:
                return base
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts] or [np.zeros(0, dtype)])


def _ops(prog: Program, times: OpTimes) -> Ops:
    """The program and ``times`` as the kernel reads them."""
    use = times.use
    workers = use.workers if use is not None else 1
    n_inst = prog.instances
    none = np.zeros(0)
    links = use.links if use is not None else None
    wire = (
        use.wire
        if use is not None and use.wire is not None
        else np.zeros(n_inst if workers > 1 else 0)
    )
    queued = use.queued_wire if use is not None else None
    link_wire = use.link_wire if use is not None else None
    bucket = use.bucket if use is not None else None
    duration, free_after = _f64(times.duration), _f64(times.releases(prog))
    drained, free_drained, drawn, credit = duration, free_after, none, none
    node_lo, nodes = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if bucket is not None:
        drawn, credit = _f64(bucket.drawn), _f64(bucket.credit)
        drained = duration if times.drained is None else _f64(times.drained)
        free_drained = _f64(times.releases(prog, drained=True))
        node_lo = np.r_[0, np.cumsum([len(g) for g in bucket.nodes])].astype(np.int64)
        nodes = np.array([n for g in bucket.nodes for n in g], dtype=np.int64)
    kinds, args, gaps = (
        _whole(prog.mark_types, np.int8),
        _whole(prog.args, np.int32),
        _whole(prog.gaps, np.float64),
    )
    return Ops(
        kinds=kinds,
        args=args,
        gaps=gaps,
        owner=prog.trace.rank.astype(
            np.int16 if n_inst and prog.trace.world_size < 2**15 else np.int32, copy=False
        ),
        mark_lo=np.r_[0, np.cumsum([len(m) for m in prog.mark_types])].astype(np.int64),
        inst_of=prog.inst,
        members=prog.members,
        offsets=prog.offsets,
        first=prog.first_of_queue,
        # with several workers, an instance that ran apart from the one ahead of it in
        # the capture still shares the workers with it: only a group's first has none ahead
        head=prog.opens_queue if workers > 1 else prog.first_of_queue,
        send_of=prog.send_of,
        recv_of=prog.recv_of,
        meets=prog.rendezvous,
        reverse=prog.reverse,
        behind=prog.behind,
        duration=duration,
        drained=drained,
        free_after=free_after,
        free_drained=free_drained,
        link=np.full(n_inst, -1, dtype=np.int32)
        if links is None
        else links.astype(np.int32, copy=False),
        group=prog.inst_group.astype(np.int32, copy=False),
        wire=_f64(wire),
        queued_wire=_f64(wire if queued is None else queued),
        link_wire=none if link_wire is None else _f64(link_wire),
        drawn=drawn,
        credit=credit,
        node_lo=node_lo,
        nodes=nodes,
        workers=workers,
        has_bucket=bucket is not None,
        has_link_wire=link_wire is not None,
    )


def _links(prog: Program, times: OpTimes) -> Links:
    """The links that messages of several channels cross (a link of one channel carries
    its messages one after the other, found as they come) and the nodes' buckets, each
    full at time 0, with room for all that can come on each."""
    use = times.use
    links = use.links if use is not None and use.links is not None else np.zeros(0, np.int64)
    bucket = use.bucket if use is not None else None
    on_link = links >= 0
    n_nodes = 1 + max(
        int(links.max(initial=-1)),
        max((n for g in bucket.nodes for n in g), default=0) if bucket is not None else 0,
    )
    pairs = np.flatnonzero(on_link)
    n_groups = len(prog.cost_groups)
    crossing = np.unique(links[pairs].astype(np.int64) * n_groups + prog.inst_group[pairs])
    k, n = np.unique(crossing // n_groups, return_counts=True)
    shared = np.zeros(n_nodes, dtype=np.int8)
    shared[k[n > 1]] = 1
    room = np.bincount(links[on_link], minlength=n_nodes) * shared
    width = int(n[n > 1].max(initial=1))
    first_pair = int(np.argmax(prog.send_of >= 0)) if (prog.send_of >= 0).any() else 0
    n_pairs = prog.instances - first_pair if shared.any() else 0
    total = int(room.sum())
    f, i = np.zeros, np.zeros
    return Links(
        shared=shared,
        lf=np.array([[-math.inf, 0.0, -math.inf]] * n_nodes),
        li=np.zeros((n_nodes, 6), dtype=np.int64),
        base=np.r_[0, np.cumsum(room)].astype(np.int64),
        **{name: f(total) for name in ("jt", "jwire", "jcredit", "lt", "lwire", "lcredit")},
        **{name: i(total, np.int64) for name in ("jn", "jch", "jpair", "ln", "lch", "lpair")},
        cpair=i((n_nodes, width), np.int64),
        cleft=f((n_nodes, width)),
        cch=i((n_nodes, width), np.int64),
        spair=i(width, np.int64),
        sleft=f(width),
        sch=i(width, np.int64),
        going=i(width, np.int64),
        wants=f(width),
        shares=f(width),
        order=i(width, np.int64),
        finished=i(width, np.int64),
        got_t=f(n_pairs),
        got=f(n_pairs),
        first_pair=first_pair,
        heap_t=f(2 * total + 2),
        heap_v=i(2 * total + 2, np.int64),
        heap_k=i(2 * total + 2, np.int64),
        counts=i(4, np.int64),
    )


def _buckets(prog: Program, times: OpTimes, links: Links) -> Buckets:
    """Every node's bucket, full at time 0, with room for a draw per op leaving by the
    node and per pair off its shared link."""
    use = times.use
    bucket = use.bucket if use is not None else None
    draws = np.zeros(links.shared.size, dtype=np.int64)
    if bucket is not None:
        draws += np.diff(links.base)
        spends = np.bincount(
            prog.inst_group[_f64(bucket.credit) > 0.0], minlength=len(bucket.nodes)
        )
        for g, nodes in enumerate(bucket.nodes):
            draws[list(nodes)] += spends[g]
    room = int(draws.sum())
    return Buckets(
        base=np.r_[0, np.cumsum(draws)].astype(np.int64),
        leaves=np.zeros(room),
        drawn=np.zeros(room),
        outs=np.zeros(room),
        draws=np.zeros(draws.size, dtype=np.int64),
        capacity=float(bucket.capacity_s) if bucket is not None else 0.0,
        on=bucket is not None,
    )


def _state(prog: Program, ops: Ops, links: Links) -> State:
    """The replay's state before it starts: nothing issued, every rank ready."""
    n_ev, n_inst, n_ranks = prog.inst.size, prog.instances, len(prog.mark_types)
    pool = n_inst if ops.workers > 1 else 0
    # pairs whose ready notice may follow a message back wait on it
    n_pairs = n_inst - links.first_pair if (prog.reverse >= 0).any() else 0
    return State(
        issue=np.full(n_ev, NOT_YET),
        end=np.full(n_ev, NOT_YET),
        held=np.zeros(n_ev),
        start=np.zeros(n_inst),
        state=np.zeros(n_inst, dtype=np.int8),
        by=np.full(n_inst, NO_EVENT, dtype=np.int32),
        arrives=np.full(n_inst, NOT_YET),
        arrival=np.zeros(n_inst, dtype=np.int8),
        missing=np.diff(prog.offsets).astype(np.int32, copy=False),
        steps=np.full(2 * prog.trace.step_rank.size, NOT_YET),
        latest=np.zeros(pool),
        second=np.zeros(pool),
        on_wire=np.zeros(pool),
        lost=np.zeros(1),
        busy=np.full(links.shared.size, -math.inf),
        waiting=np.zeros(n_ranks, dtype=np.int8),
        after_head=np.full(n_pairs, NO_EVENT, dtype=np.int32),
        after_tail=np.full(n_pairs, NO_EVENT, dtype=np.int32),
        after_next=np.full(n_pairs, NO_EVENT, dtype=np.int32),
        clock=np.zeros(n_ranks),
        blocked_on=np.full(n_ranks, NO_EVENT, dtype=np.int64),
        at=ops.mark_lo[:-1].copy(),
        ready=np.arange(n_ranks - 1, -1, -1, dtype=np.int64),
        resume=np.zeros(n_pairs + 1, dtype=np.int64),
        counts=np.array([n_ranks, 0, 0], dtype=np.int64),
    )
