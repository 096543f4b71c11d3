"""How long each op lasts in a replay: as measured, or from the cost model of a fabric.

*Measured*: an instance starts, in the capture, when its last member issued
it (a p2p pair: when its send was issued) and its queue's previous instance
had ended; member ``e`` lasts from there to its own recorded end (never
less than 0). Fed to the replay as elapsed (a root that returned before a
late member issued keeps its end before the start), these reproduce the
captured timeline: the self-check.

*Modelled*: every member lasts the cost model's time
(:meth:`commlens.predict.topology.Fabric.time`) for the op's real message
size on its group's placement over nodes, the inter-node link shared by
the concurrent flows of the groups of its role
(:func:`commlens.predict.topology.link_flows`). Object collectives cost as
their tensor op (``all_gather_object`` as ``all_gather``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from commlens.errors import UsageError
from commlens.optable import GLOO, TENSOR_TWIN
from commlens.predict.cost import flat_time
from commlens.predict.limits import check_scale
from commlens.predict.profiles import NetworkProfile
from commlens.predict.topology import Fabric, link_flows
from commlens.whatif.model import Program


def _running_max(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` that starts afresh wherever ``first`` is True."""
    if not values.size:
        return values
    segment = np.cumsum(first) - 1
    base = int(values.min())
    span = int(values.max()) - base + 1
    if span * (int(segment[-1]) + 1) < (1 << 62):  # one accumulate over shifted segments
        shift = segment.astype(np.int64) * span
        return np.maximum.accumulate(values - base + shift) - shift + base
    out = values.copy()
    for i in range(1, values.size):
        if not first[i] and out[i - 1] > out[i]:
            out[i] = out[i - 1]
    return out


def _captured_starts(prog: Program) -> tuple[np.ndarray, np.ndarray]:
    """(start, queue release) of each instance in the capture, in ns.

    A collective started when its last member issued it and the previous op
    on its group released the queue, at the first of its members' ends (a
    member's recorded end can be late, e.g. a completion callback waiting for
    the GIL; per-rank order makes the first end a safe bound); a p2p pair when
    its send was issued (a rendezvous: and its receive, and the message its ready
    notice followed had arrived: :attr:`~commlens.whatif.model.Program.behind`) and
    the previous send had ended. So along a queue
    ``release[i] = max(first end[i], start[i])`` and ``start[i] = max(last
    issue[i], release[i - 1])``.
    """
    tr = prog.trace
    n = prog.instances
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    last_issue = np.full(n, low, dtype=np.int64)
    np.maximum.at(last_issue, prog.inst, tr.t_issue)
    first_end = np.full(n, high, dtype=np.int64)
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
    release = _running_max(np.maximum(first_end, last_issue), prog.first_of_queue)
    before = np.r_[low, release[:-1]]
    start = np.where(prog.first_of_queue, last_issue, np.maximum(last_issue, before))
    return start, release


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


def node_links(prog: Program, fabric: Fabric) -> np.ndarray:
    """The link each p2p pair crosses: its source node's link out (-1 for a pair inside
    a node, for a collective, and where a node has several links: ``nics_per_node``).

    Messages that several channels send out of one node at once do not overtake
    each other on its link: they arrive one after the other (measured on gloo: a
    pipeline stage's two receives took 7.3 and 17.5 ms, not the same time)."""
    links = np.full(prog.instances, -1, dtype=np.int32)
    pairs = np.flatnonzero(prog.send_of >= 0)
    if not pairs.size or fabric.nics_per_node > 1:
        return links
    channels, which = np.unique(prog.inst_group[pairs], return_inverse=True)
    ends = [prog.cost_groups[g] for g in channels.tolist()]
    src = np.array([fabric.node(c[0]) for c in ends], dtype=np.int64)[which.ravel()]
    dst = np.array([fabric.node(c[-1]) for c in ends], dtype=np.int64)[which.ravel()]
    links[pairs[src != dst]] = src[src != dst]
    return links


def link_waits(prog: Program, links: np.ndarray) -> np.ndarray:
    """Seconds each receive's message spent in the capture waiting for its node's link
    (:func:`node_links`; the replay's link queue), per event (0 for others): its time
    from its pair's start less its own share of the link's busy spell it arrived in
    (a spell: messages each started before the ones ahead of it on the link had all
    arrived), a share by bytes.

    Messages out of one node at once share its link; taken one after the other, as the
    replay does, the second's time from its start holds the first's, which the replay's
    queue adds again. Its time on the wire is what is left. Each message's share of the
    spell, not its time after the one ahead of it arrived: messages of two ranks
    (sockets) cross the shaper side by side and both arrive about two wire times after
    their start. Counted after the one ahead, a 3d job's two receives on one link came
    out at 16 ms and 1.4 ms on the wire at 50 Mbit/s (one rank's always first); the
    replay, which may take them in the other order, then carried the pair in 17 ms
    where the capture took 19, and its self-replay came out 6.2% short (4.0% with the
    shares)."""
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
    busy = _running_max(ended, first).astype(float)
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
    both wire times: a DDP job's first gradient bucket at 200 Mbit/s took 110 ms
    from its start (65 ms of wire), the second ended 20 ms after it. Kept in seconds,
    the first one's 45 ms beyond its wire time stayed on every link: from 200 Mbit/s
    to 1 Gbit/s its all-reduce came out at 58 ms where it took 18. The replay's queue
    puts the second call's bytes after the first's (:func:`~commlens.whatif.replay.replay`),
    so the first keeps only its own share, and what is left is its wait."""
    out = np.zeros(prog.inst.size)
    coll = np.flatnonzero(prog.send_of < 0)
    if coll.size < 2:
        return out
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
    took = (tr.t_end - start[prog.inst]) / 1e9  # as elapsed(), its starts at hand
    return np.minimum(per_inst[prog.inst], np.maximum(took, 0.0))


def wire_times(
    prog: Program, fabric: Fabric, groups: list[tuple[int, ...]], burst: float
) -> np.ndarray:
    """Seconds each instance's bytes keep its link busy on ``fabric`` (as :func:`modelled`
    with ``flat``, without any step latency: its wire time and the link's alphas; a
    pair's, its receive's)."""
    first = prog.members[prog.offsets[:-1]]
    pairs = prog.send_of >= 0
    first[pairs] = prog.recv_of[pairs]
    return modelled(prog, fabric, groups, flat=True, steps=Steps(burst_bytes=burst), events=first)


def wire_pair(
    prog: Program, fabric: Fabric, groups: list[tuple[int, ...]], burst: float
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each instance's wire time on a link of bucket ``burst``, and (when there is a
    bucket) its wire time without the bucket's credit: what it takes when its bytes
    follow another op's on the busy link, which did not refill the bucket."""
    wire = wire_times(prog, fabric, groups, burst)
    return wire, wire_times(prog, fabric, groups, 0.0) if burst else None


def ring_flows(fabric: Fabric, groups: Iterable[Sequence[int]]) -> int:
    """Flows on the busiest node's inter-node link when every group runs a flat ring in
    its rank order: the ring's edges that leave the node, over the role's groups."""
    per_node: Counter[int] = Counter()
    for group in groups:
        for r, nxt in zip(group, (*group[1:], *group[:1]), strict=True):
            if fabric.node(r) != fabric.node(nxt):
                per_node[fabric.node(r)] += 1
    return max(per_node.values(), default=1)


def send_flows(fabric: Fabric, channels: Iterable[Sequence[int]]) -> int:
    """Flows on the busiest node's link out when the (source, destination) ``channels``
    send at once: those whose source is on the node and destination elsewhere (a
    link carries each direction on its own)."""
    per_node = Counter(
        fabric.node(c[0]) for c in channels if fabric.node(c[0]) != fabric.node(c[-1])
    )
    return max(per_node.values(), default=1)


@dataclass(frozen=True)
class Steps:
    """What a gloo op pays per algorithm step beyond its link's alpha and beta.

    An op of ``k`` steps (the cost model's alpha count: 2(n−1) for a ring
    all-reduce, 1 for a send) moves ``1/k`` of its wire bytes ``W`` per step, pays
    the link's alpha per step, and each step costs the host the backend's *step
    latency* (waking the thread that handles it, the syscalls, the copy and
    reduction of its chunk): ``H = k·λ``. Host and wire overlap but for one step:
    a ring step's bytes leave while the host works on the chunk before them, so
    the op lasts ``k·α + max(W, H) + min(W, H)/k`` (a one-step op, a send or
    receive, pays both in full; with ``λ = 0``, the cost model's ``k·α + W``).
    A host-bound op moves with the link by one step's change of wire, a
    wire-bound one pays one step of host (docs/whatif.md: gpt-tiny's 564 KB
    all-reduce took 9.0, 9.5 and 28.7 ms unshaped, at 1 Gbit/s and at
    200 Mbit/s, with 1.0, 3.0 and 30.9 ms of wire after the bucket). A profile
    fitted by ``bench --fit`` on a host has that host's latency in its alpha
    already: there a step's host costs what ``λ`` has beyond ``α`` (the longer of
    the two latencies counts, not both). A shaped (emulated) link lets its bucket
    (``burst_bytes``) through at once after an idle spell, so the first
    ``burst·β`` seconds of an op's wire time are not spent.
    """

    latency_s: dict[tuple[str, str, int], float] = field(default_factory=dict)
    """Step latency per kind of op (op, role, nodes its group spans)."""
    default_latency_s: float = 0.0
    """Step latency of kinds without their own."""
    burst_bytes: float = 0.0
    """Bucket of the inter-node link (an emulated one), bytes; 0 for an unshaped link."""

    def latency(self, op: str, role: str, nodes: int) -> float:
        return self.latency_s.get((op, role, nodes), self.default_latency_s)


NO_STEPS = Steps()


def stepped_time(
    op: str,
    size: float,
    n: int,
    profile: NetworkProfile,
    share: int,
    algorithm: str,
    latency_s: float,
    burst_bytes: float,
    shorter: bool = False,
) -> float:
    """Seconds of one ``op`` on ``n`` ranks of one link type (``share`` flows on it): its
    ``k`` steps' alphas, and its wire time ``W`` after the link's bucket and its steps'
    ``latency_s`` on the host ``H`` overlapped but for one step, ``k·α + max(W, H) +
    min(W, H)/k`` (see :class:`Steps`). With ``shorter``, ``min(W, H)`` instead: what of
    the two can fail to overlap (0 for an op of one step, which pays both)."""
    alpha, beta = profile.alpha(op), profile.beta(op)
    k = round(flat_time(op, 0.0, n, 1.0, 0.0, algorithm))
    wire = flat_time(op, size, n, 0.0, beta * share, algorithm)
    if k <= 0:
        return 0.0 if shorter else wire
    host = k * (max(latency_s - alpha, 0.0) if host_in_alpha(profile) else latency_s)
    wire = max(wire - burst_bytes * beta, 0.0)
    if shorter:
        return min(wire, host) if k > 1 else 0.0
    return k * alpha + max(wire, host) + min(wire, host) / k


def host_in_alpha(profile: NetworkProfile) -> bool:
    """True for a profile fitted on a host (``bench --fit``: per-op alphas), whose alpha
    holds that host's step latency as well as the link's."""
    return any(o.alpha_s is not None for o in profile.ops.values())


def _op_names(prog: Program, flat: bool) -> list[str]:
    """The op each op code is costed as: object collectives as their tensor op, and
    (``flat``: gloo) the ops gloo runs as another as that one."""
    ops = [TENSOR_TWIN.get(o, o) for o in prog.trace.op_names]
    return [GLOO.op_as_run(o) for o in ops] if flat else ops


def op_steps(prog: Program, fabric: Fabric, flat: bool = False) -> np.ndarray:
    """Algorithm steps of each event's op on ``fabric`` (its alpha count, 0 for none)."""
    ops = _op_names(prog, flat)

    def steps(op: int, size: float, group: tuple[int, ...], role: int) -> float:
        name = ops[op]
        n = 2 if name in ("send", "recv") else len(group)
        return round(flat_time(name, 0.0, n, 1.0, 0.0, fabric.algorithm)) if group else 0

    return _per_kind(prog, prog.cost_groups, steps).astype(np.int64)


def _per_kind(
    prog: Program,
    groups: list[tuple[int, ...]],
    cost: Callable[[int, float, tuple[int, ...], int], float],
    events: np.ndarray | None = None,
) -> np.ndarray:
    """``cost(op, size, group, role)`` of each event (its own op: a pair's send and
    receive differ; its instance's size, group and role), evaluated once per
    distinct combination; of ``events`` only where given."""
    n_roles = len(prog.trace.role_names)
    sizes, inst_kinds, inst_kind = prog.inst_kinds
    ops, inst = (
        (prog.trace.op, prog.inst) if events is None else (prog.trace.op[events], prog.inst[events])
    )
    key = ops.astype(np.int64)
    key *= inst_kinds.size
    key += inst_kind[inst]
    del ops, inst
    unique, which = dense_unique(key)
    del key
    times = np.array(
        [
            cost(
                k // inst_kinds.size,
                float(sizes[ik % sizes.size]),
                groups[ik // (sizes.size * n_roles)],
                ik // sizes.size % n_roles,
            )
            for k, ik in zip(
                unique.tolist(), inst_kinds[unique % inst_kinds.size].tolist(), strict=True
            )
        ],
        dtype=float,
    )
    return times[which]


def dense_unique(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, index of each element's) of non-negative ``key``, in linear
    time by counting when the values are few next to the elements, else by sorting."""
    if key.size and int(key.max()) < 4 * key.size + 1024:
        present = np.flatnonzero(np.bincount(key))
        index = np.zeros(present[-1] + 1, dtype=np.int64)
        index[present] = np.arange(present.size)
        return present, index[key]
    unique, which = np.unique(key, return_inverse=True)
    return unique, which.ravel()


def _groups_of_roles(
    prog: Program, cost_groups: list[tuple[int, ...]], roles: np.ndarray
) -> tuple[dict[int, set[tuple[int, ...]]], dict[int, set[tuple[int, ...]]]]:
    """Per role, the groups of its collectives and the (source, destination) channels
    of its point-to-point pairs."""
    n_groups = len(cost_groups)
    colls: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    channels: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    pairs = prog.send_of >= 0
    for is_p2p, into in ((False, colls), (True, channels)):
        mine = pairs == is_p2p
        for key in np.unique(roles[mine] * n_groups + prog.inst_group[mine]).tolist():
            into[key // n_groups].add(cost_groups[key % n_groups])
    return colls, channels


def modelled(
    prog: Program,
    fabric: Fabric,
    groups: list[tuple[int, ...]] | None = None,
    flat: bool = False,
    steps: Steps = NO_STEPS,
    events: np.ndarray | None = None,
    shorter: bool = False,
) -> np.ndarray:
    """Seconds each event's op lasts on ``fabric`` (the same for all members; of
    ``events`` only where given), each instance costed on ``groups[inst_group]``
    (default: the run's own groups); with ``shorter`` (and ``flat``), the shorter of
    its wire and host time instead (:func:`stepped_time`).

    ``flat`` (gloo): a collective whose group spans nodes runs one ring over all its
    members in rank order, at the inter-node rate, its edges that leave a node
    sharing that node's link (:func:`ring_flows`), not the hierarchical
    intra/inter split of :meth:`Fabric.time`. Sends share a node's link with the
    other sends of their role out of that node (:func:`send_flows`), except a flat
    one on a node's only link, whose queue in the replay takes its messages in turn
    (:func:`node_links`): it costs the full rate. A flat send costs its host work
    only: it ends once its bytes are in the socket (its receive carries the wire
    time). Each step of a flat op pays ``steps``' latency and the link's burst
    (:class:`Steps`), and a reduce-scatter costs an all-reduce (:data:`commlens.optable.GLOO`).
    """
    tr = prog.trace
    cost_groups = prog.cost_groups if groups is None else groups
    ops = _op_names(prog, flat)
    roles = prog.inst_role
    colls, channels = _groups_of_roles(prog, cost_groups, roles)
    flows = {role: link_flows(fabric, groups) for role, groups in colls.items()}
    rings = {role: ring_flows(fabric, groups) for role, groups in colls.items()}
    p2p = {role: send_flows(fabric, groups) for role, groups in channels.items()}

    def cost(op_code: int, size: float, group: tuple[int, ...], role: int) -> float:
        op = ops[op_code]
        is_p2p = op in ("send", "recv")
        if not flat:
            return (
                0.0
                if shorter
                else fabric.time(op, size, group, (p2p if is_p2p else flows).get(role, 1))
            )
        if not group:
            return 0.0
        nodes = fabric.shape(group)[0]
        across = nodes > 1
        # one link out of a node: the replay's link queue takes its messages in turn
        on_link = (p2p if is_p2p else rings).get(role, 1)
        queued = is_p2p and fabric.nics_per_node == 1
        share = 1 if queued else max(1, -(-on_link // fabric.nics_per_node))
        latency = steps.latency(op, tr.role_names[role], nodes)
        return stepped_time(
            op,
            0.0 if op == "send" else size,
            2 if is_p2p else len(group),
            fabric.inter if across else fabric.intra,
            share if across else 1,
            fabric.algorithm,
            latency,
            steps.burst_bytes if across else 0.0,
            shorter,
        )

    return _per_kind(prog, cost_groups, cost, events)


def scaled_groups(prog: Program, dp: int) -> tuple[list[tuple[int, ...]], int]:
    """The cost groups of a data-parallel scale-out to ``dp`` ranks per dp group, and its world.

    The captured job is repeated ``f = dp / n`` times (``n`` the size of its dp
    groups): replica ``k`` holds ranks ``r + k·world``. Every group whose ops
    carry the role ``dp`` becomes the union of its copies; other groups and
    p2p channels stay as they are.
    """
    tr = prog.trace
    if "dp" not in tr.role_names:
        raise UsageError(
            "--dp: the run has no data-parallel group (no op with role dp) to scale out"
        )
    dp_code = tr.role_names.index("dp")
    roles = prog.inst_role
    dp_groups = sorted(set(prog.inst_group[roles == dp_code].tolist()))
    sizes = {len(prog.cost_groups[g]) for g in dp_groups}
    if len(sizes) != 1:
        raise UsageError(f"--dp: the run's dp groups differ in size ({sorted(sizes)})")
    (n,) = sizes
    check_scale("dp", dp)  # a scale the replay can hold, before any memory is taken
    if dp < n or dp % n:
        raise UsageError(f"--dp {dp} must be a multiple of the run's dp degree {n}")
    copies, world = dp // n, tr.world_size
    check_scale("world_size", copies * world)
    groups = list(prog.cost_groups)
    for g in dp_groups:
        groups[g] = tuple(r + k * world for k in range(copies) for r in prog.cost_groups[g])
    return groups, world * copies
