"""How long each op lasted in the capture, and what of that was waiting.

An instance starts, in the capture, when its last member issued it (a p2p
pair: when its send was issued) and its queue's previous instance had ended;
member ``e`` lasts from there to its own recorded end (never less than 0).
Fed to the replay as elapsed (a root that returned before a late member
issued keeps its end before the start), these reproduce the captured
timeline: the self-check. The cost model's times are
:mod:`~commlens.whatif.costing`'s.
"""

from __future__ import annotations

import numpy as np

from commlens.analysis.matched.queues import instance_starts, running_max
from commlens.whatif.model import Program


def _captured_starts(prog: Program) -> tuple[np.ndarray, np.ndarray]:
    """(start, queue release) of each instance in the capture, in ns, by the matched
    run's queue rule (:func:`commlens.analysis.matched.queues.instance_starts`).

    A collective started when its last member issued it and the previous op
    on its group released the queue, at the first of its members' ends; a p2p pair when
    its send was issued (a rendezvous: and its receive, and the message its ready
    notice followed had arrived: :attr:`~commlens.whatif.model.Program.behind`) and
    the previous send had ended. So along a queue
    ``release[i] = max(first end[i], start[i])`` and ``start[i] = max(last
    issue[i], release[i - 1])``.
    """
    tr = prog.trace
    n = prog.instances
    last_issue = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_issue, prog.inst, tr.t_issue)
    first_end = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_end, prog.inst, tr.t_end)
    pairs = prog.send_of >= 0
    sends = prog.send_of[pairs]
    issued = tr.t_issue[sends]
    meets = prog.rendezvous[pairs]
    issued[meets] = np.maximum(issued[meets], tr.t_issue[prog.recv_of[pairs][meets]])
    late = prog.behind[pairs]
    arrived = tr.t_end[prog.recv_of[prog.reverse[pairs][late]]]
    issued[late] = np.maximum(issued[late], arrived)
    last_issue[pairs], first_end[pairs] = issued, tr.t_end[sends]
    del issued, meets, late, arrived
    return instance_starts(last_issue, first_end, prog.first_of_queue)


def elapsed(prog: Program) -> np.ndarray:
    """Seconds from each event's instance start to its recorded end, as captured: below 0
    for a member that ended before its instance started (a broadcast's root, whose data
    was buffered before a late member issued)."""
    start, _ = _captured_starts(prog)
    return (prog.trace.t_end - start[prog.inst]) / 1e9


def measured(prog: Program) -> np.ndarray:
    """Seconds each event's op lasted in the capture, from its instance's start (never
    below 0)."""
    return np.maximum(elapsed(prog), 0.0)


def measured_release(prog: Program) -> np.ndarray:
    """Seconds from each instance's start until its queue was free again, as captured."""
    start, release = _captured_starts(prog)
    return (release - start) / 1e9


def link_waits(prog: Program, links: np.ndarray) -> np.ndarray:
    """Seconds each receive's message spent in the capture waiting for its node's link
    (:func:`node_links`; the replay's shared link), per event (0 for others): its time
    from its pair's start less its own share of the link's busy spell it arrived in
    (a spell: messages each started before the ones ahead of it on the link had all
    arrived), a share by bytes.

    Messages out of one node at once share its link; taken one after the other, as the
    replay does, the second's time from its start holds the first's, which the replay's
    queue adds again. Its time on the wire is what is left. Each message's share of the
    spell, not its time after the one ahead of it arrived: messages that come together
    cross side by side, and which of two came first a replay may see the other way
    round (docs/whatif.md, "The model of a run")."""
    out = np.zeros(prog.inst.size)
    crossing = np.flatnonzero(links >= 0)
    if not crossing.size:
        return out
    start, _ = _captured_starts(prog)
    recvs = prog.recv_of[crossing]
    order = np.lexsort((crossing, start[crossing], links[crossing]))
    link = links[crossing][order]
    t0 = int(start[crossing].min())  # ns from there fit a float exactly
    began = (start[crossing][order] - t0).astype(float)
    came = prog.trace.t_end[recvs][order] - t0
    first = np.r_[True, link[1:] != link[:-1]]
    size = prog.inst_size[crossing][order].astype(float)
    own = _spell_shares(first, began, came, began, size)
    out[recvs[order]] = np.maximum(came - began - own, 0.0) / 1e9
    return out


def _spell_shares(
    first: np.ndarray, began: np.ndarray, ended: np.ndarray, joined: np.ndarray, weight: np.ndarray
) -> np.ndarray:
    """Each item's share (by ``weight``) of the busy spell it belongs to, in the units
    of its times: items in time order on one queue (``first`` opens a queue), each
    with its start, end and the time it ``joined`` (its start, or its issue); one
    joins the spell of the ones ahead of it if it joined before they had all ended
    (``ended``, int ns), and the spell lasts from its first item's start until the
    latest end of its items."""
    busy = running_max(ended, first).astype(float)
    before = np.r_[-np.inf, busy[:-1]]
    before[first] = -np.inf
    opens = first | (joined >= before)
    spell = np.cumsum(opens) - 1
    length = np.maximum.reduceat(busy, np.flatnonzero(opens))[spell] - began[opens][spell]
    total = np.bincount(spell, weights=weight)[spell]
    return length * np.divide(weight, total, out=np.ones_like(weight), where=total > 0)


def worker_waits(prog: Program, wire: np.ndarray) -> np.ndarray:
    """Seconds each member of a collective spent in the capture beside others of its
    group on the link (gloo's workers, the replay's bytes after bytes), per event (0
    for p2p): its call's time from its start less its own share of the group's busy
    spell it ran in (a spell: calls each issued before the ones ahead of it on the
    group had all ended), a share by its wire time ``wire`` (per instance, on the
    own link).

    Two calls that run beside each other share the link, and the first takes about
    both wire times (docs/whatif.md, "The model of a run"). The replay's queue puts the
    second call's bytes after the first's (:func:`~commlens.whatif.replay.replay`), so
    the first keeps only its own share, and what is left is its wait."""
    coll = np.flatnonzero(prog.send_of < 0)
    if coll.size < 2:
        return np.zeros(prog.inst.size)
    tr = prog.trace
    start, _ = _captured_starts(prog)
    n = prog.instances
    last_issue = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_issue, prog.inst, tr.t_issue)
    last_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_end, prog.inst, tr.t_end)
    # queues hold only collectives or only pairs; instances of one queue are in order
    first = prog.opens_queue[coll].copy()  # a call that ended early is in its group's spell
    first[1:] |= np.diff(coll) != 1
    t0 = int(start[coll].min())
    began = (start[coll] - t0).astype(float)
    ended = last_end[coll] - t0
    own = _spell_shares(first, began, ended, (last_issue[coll] - t0).astype(float), wire[coll])
    wait = np.maximum(ended - began - own, 0.0) / 1e9
    per_inst = np.zeros(n)
    per_inst[coll] = wait
    del wait, own, began, ended, first, last_issue, last_end
    took = _seconds_since(tr.t_end, start[prog.inst])
    return np.minimum(per_inst[prog.inst], took, out=took)


def _seconds_since(t_end: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``max((t_end - start) / 1e9, 0)``, seconds from ``start`` (int ns, taken over)
    until ``t_end``, never below 0: as :func:`elapsed` finds it, in ``start``'s memory."""
    np.subtract(t_end, start, out=start)
    took = start.view(np.float64)
    np.true_divide(start, 1e9, out=took)
    return np.maximum(took, 0.0, out=took)
