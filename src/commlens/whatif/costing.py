"""How long each op lasts on a fabric, from the cost model.

Every member lasts the cost model's time
(:meth:`commlens.predict.topology.Fabric.time`) for the op's real message
size on its group's placement over nodes, the inter-node link shared by
the concurrent flows of the groups of its role
(:func:`commlens.predict.topology.link_flows`). Object collectives cost as
their tensor op (``all_gather_object`` as ``all_gather``). A backend whose
rings are flat (gloo, :class:`~commlens.whatif.backend.ReplayBackend`) runs
each op step by step on the host (:class:`Steps`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from commlens.analysis.codes import dense_codes
from commlens.errors import UsageError
from commlens.optable import TENSOR_TWIN
from commlens.predict.cost import flat_time
from commlens.predict.limits import check_scale
from commlens.predict.profiles import NetworkProfile, get_profile
from commlens.predict.topology import Fabric, link_flows
from commlens.whatif.backend import GLOO_REPLAY, NCCL_REPLAY, ReplayBackend
from commlens.whatif.model import Program


def node_links(prog: Program, fabric: Fabric) -> np.ndarray:
    """The link each p2p pair crosses: its source node's link out (-1 for a pair inside
    a node, for a collective, and where a node has several links: ``nics_per_node``).

    Messages that several channels send out of one node at once do not overtake
    each other on its link: they arrive one after the other (docs/whatif.md)."""
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


def wire_times(
    prog: Program, fabric: Fabric, groups: list[tuple[int, ...]], burst: float
) -> np.ndarray:
    """Seconds each instance's bytes keep its link busy on ``fabric`` (as :func:`modelled`
    with flat rings, without any step latency: its wire time and the link's alphas; a
    pair's, its receive's)."""
    steps = Steps(burst_bytes=burst)
    return modelled(prog, fabric, groups, GLOO_REPLAY, steps, events=_instance_events(prog))


def _instance_events(prog: Program) -> np.ndarray:
    """One event per instance that carries its wire time: a collective's first member, a
    pair's receive."""
    first = prog.members[prog.offsets[:-1]]
    pairs = prog.send_of >= 0
    first[pairs] = prog.recv_of[pairs]
    return first


def bucket_draws(
    prog: Program, fabric: Fabric, groups: list[tuple[int, ...]], burst: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per instance, in seconds of its inter-node link's wire (flat rings): what its bytes
    take from the link's bucket (its wire time without the bucket), and what a full
    bucket of ``burst`` bytes saves it (the lesser of the two); 0 inside a node."""
    first = _instance_events(prog)
    drawn = _costed(prog, fabric, groups, GLOO_REPLAY, NO_STEPS, first, _wire)
    after = _costed(prog, fabric, groups, GLOO_REPLAY, Steps(burst_bytes=burst), first, _wire)
    return drawn, drawn - after


def link_wires(
    prog: Program, fabric: Fabric, groups: list[tuple[int, ...]], links: np.ndarray
) -> np.ndarray:
    """Per instance, seconds of wire a message that crosses a node's link (``links``:
    :func:`node_links`) takes at the link's rate, without the link's alpha or bucket:
    what the messages on one link share; 0 for others."""
    out = np.zeros(prog.instances)
    crossing = np.flatnonzero(links >= 0)
    if crossing.size:
        recvs = prog.recv_of[crossing]
        out[crossing] = _costed(prog, fabric, groups, GLOO_REPLAY, NO_STEPS, recvs, _wire)
    return out


def sending_nodes(
    prog: Program, fabric: Fabric, groups: list[tuple[int, ...]]
) -> list[tuple[int, ...]]:
    """Per cost group, the nodes whose inter-node link its ops' bytes leave by: every node
    a collective's group spans (a flat ring has an edge out of each), a pair's source
    node; none for a group inside one node."""
    channels = set(np.unique(prog.inst_group[prog.send_of >= 0]).tolist())
    out: list[tuple[int, ...]] = []
    for g, members in enumerate(groups):
        nodes = tuple(sorted({fabric.node(r) for r in members}))
        if len(nodes) < 2:
            out.append(())
        elif g in channels:
            out.append((fabric.node(members[0]),))
        else:
            out.append(nodes)
    return out


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
    wire-bound one pays one step of host (docs/whatif.md, "Calibration"). A profile
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
        """The step latency of ``op`` of ``role`` over ``nodes`` nodes: its kind's, else
        that of the same op and role over another number of nodes (the latency is the
        host's, whatever link the steps cross: the nearest span, the fewer nodes first),
        else :attr:`default_latency_s`."""
        exact = self.latency_s.get((op, role, nodes))
        if exact is not None:
            return exact
        spans = [n for (o, r, n) in self.latency_s if o == op and r == role]
        if not spans:
            return self.default_latency_s
        return self.latency_s[op, role, min(spans, key=lambda n: (abs(n - nodes), n))]


NO_STEPS = Steps()


def _step_terms(
    op: str,
    size: float,
    n: int,
    profile: NetworkProfile,
    share: int,
    algorithm: str,
    latency_s: float,
    burst_bytes: float,
) -> tuple[int, float, float, float]:
    """(steps ``k``, alpha, wire time ``W`` after the link's bucket, host time ``H``) of
    one ``op`` on ``n`` ranks of one link type (``share`` flows on it); ``W`` before
    the bucket where ``k`` is 0."""
    alpha, beta = profile.alpha(op), profile.beta(op)
    k = round(flat_time(op, 0.0, n, 1.0, 0.0, algorithm))
    wire = flat_time(op, size, n, 0.0, beta * share, algorithm)
    if k <= 0:
        return k, alpha, wire, 0.0
    host = k * (max(latency_s - alpha, 0.0) if host_in_alpha(profile) else latency_s)
    return k, alpha, after_bucket(op, wire, beta, burst_bytes), host


def after_bucket(op: str, wire: float, beta: float, burst_bytes: float) -> float:
    """Seconds ``op``'s ``wire`` time (at ``beta`` s/byte) takes on a shaped link whose
    bucket holds ``burst_bytes``: the bytes the bucket covers cross at the rate of the
    link under the shaper (the veth pair: the loopback profile's), never faster than
    the link's own, the rest at the link's rate."""
    if burst_bytes <= 0.0 or wire <= 0.0:
        return wire
    covered = min(burst_bytes * beta, wire)
    line = min(get_profile("loopback").beta(op), beta)
    return wire - covered + covered * line / beta


def stepped_time(
    op: str,
    size: float,
    n: int,
    profile: NetworkProfile,
    share: int,
    algorithm: str,
    latency_s: float,
    burst_bytes: float,
) -> float:
    """Seconds of one ``op`` on ``n`` ranks of one link type (``share`` flows on it): its
    ``k`` steps' alphas, and its wire time ``W`` after the link's bucket and its steps'
    ``latency_s`` on the host ``H`` overlapped but for one step, ``k·α + max(W, H) +
    min(W, H)/k`` (see :class:`Steps`)."""
    terms = _step_terms(op, size, n, profile, share, algorithm, latency_s, burst_bytes)
    return _op_time(*terms)


StepQuantity = Callable[[int, float, float, float], float]
"""A quantity of an op from its steps, alpha, wire time and host time."""


def _op_time(k: int, alpha: float, wire: float, host: float) -> float:
    """The op's time (:func:`stepped_time`)."""
    return k * alpha + max(wire, host) + min(wire, host) / k if k > 0 else wire


def _wire(k: int, alpha: float, wire: float, host: float) -> float:
    """The op's wire time after its link's bucket."""
    return wire


def _slope(k: int, alpha: float, wire: float, host: float) -> float:
    """How much the op's time grows with its wire time: 1 where the wire is the longer
    (or the op has one step), ``1/k`` where the host is."""
    return 1.0 if k <= 1 or wire >= host else 1.0 / k


def _overlap(k: int, alpha: float, wire: float, host: float) -> float:
    """The shorter of the op's wire and host time, ``min(W, H)``: what of the two can fail
    to overlap (0 for an op of one step, which pays both)."""
    return min(wire, host) if k > 1 else 0.0


def host_in_alpha(profile: NetworkProfile) -> bool:
    """True for a profile fitted on a host (``bench --fit``: per-op alphas), whose alpha
    holds that host's step latency as well as the link's."""
    return any(o.alpha_s is not None for o in profile.ops.values())


def _op_names(prog: Program, backend: ReplayBackend) -> list[str]:
    """The op each op code is costed as: object collectives as their tensor op, and the
    ops ``backend`` runs as another as that one."""
    return [backend.op_as_run(TENSOR_TWIN.get(o, o)) for o in prog.trace.op_names]


def op_steps(prog: Program, fabric: Fabric, backend: ReplayBackend = NCCL_REPLAY) -> np.ndarray:
    """Algorithm steps of each event's op on ``fabric`` (its alpha count, 0 for none)."""
    ops = _op_names(prog, backend)

    def steps(op: int, size: float, group: tuple[int, ...], role: int) -> float:
        name = ops[op]
        n = 2 if name in ("send", "recv") else len(group)
        return round(flat_time(name, 0.0, n, 1.0, 0.0, fabric.algorithm)) if group else 0

    return _per_cost_key(prog, prog.cost_groups, steps).astype(np.int64)


def _per_cost_key(
    prog: Program,
    groups: list[tuple[int, ...]],
    cost: Callable[[int, float, tuple[int, ...], int], float],
    events: np.ndarray | None = None,
) -> np.ndarray:
    """``cost(op, size, group, role)`` of each event (its own op: a pair's send and
    receive differ; its instance's size, group and role), evaluated once per
    distinct combination; of ``events`` only where given."""
    n_roles = len(prog.trace.role_names)
    sizes, keys, key_of = prog.cost_keys
    ops, inst = (
        (prog.trace.op, prog.inst) if events is None else (prog.trace.op[events], prog.inst[events])
    )
    key = ops.astype(np.int64)
    key *= keys.size
    key += key_of[inst]
    del ops, inst
    unique, which = dense_codes(key)
    del key
    times = np.array(
        [
            cost(
                k // keys.size,
                float(sizes[ik % sizes.size]),
                groups[ik // (sizes.size * n_roles)],
                ik // sizes.size % n_roles,
            )
            for k, ik in zip(unique.tolist(), keys[unique % keys.size].tolist(), strict=True)
        ],
        dtype=float,
    )
    return times[which]


def _groups_of_roles(
    prog: Program, cost_groups: list[tuple[int, ...]]
) -> tuple[dict[int, set[tuple[int, ...]]], dict[int, set[tuple[int, ...]]]]:
    """Per role, the groups of its collectives and the (source, destination) channels
    of its point-to-point pairs (``cost_groups`` of :attr:`Program.role_groups`)."""
    out: tuple[dict[int, set[tuple[int, ...]]], ...] = (defaultdict(set), defaultdict(set))
    for into, pairs in zip(out, prog.role_groups, strict=True):
        for role, group in pairs:
            into[role].add(cost_groups[group])
    return out[0], out[1]


def modelled(
    prog: Program,
    fabric: Fabric,
    groups: list[tuple[int, ...]] | None = None,
    backend: ReplayBackend = NCCL_REPLAY,
    steps: Steps = NO_STEPS,
    events: np.ndarray | None = None,
) -> np.ndarray:
    """Seconds each event's op lasts on ``fabric`` (the same for all members; of
    ``events`` only where given), each instance costed on ``groups[inst_group]``
    (default: the run's own groups).

    With flat rings (``backend``: gloo), a collective whose group spans nodes runs one
    ring over all its members in rank order, at the inter-node rate, its edges that
    leave a node sharing that node's link (:func:`ring_flows`), not the hierarchical
    intra/inter split of :meth:`Fabric.time`. Sends share a node's link with the
    other sends of their role out of that node (:func:`send_flows`), except a flat
    one on a node's only link, whose queue in the replay takes its messages in turn
    (:func:`node_links`): it costs the full rate. A flat send costs its host work
    only: it ends once its bytes are in the socket (its receive carries the wire
    time). Each step of a flat op pays ``steps``' latency and the link's burst
    (:class:`Steps`), and a reduce-scatter costs an all-reduce (:data:`commlens.optable.GLOO`).
    """
    return _costed(prog, fabric, groups, backend, steps, events, _op_time)


def unoverlapped(
    prog: Program,
    fabric: Fabric,
    groups: list[tuple[int, ...]] | None,
    backend: ReplayBackend,
    steps: Steps,
    events: np.ndarray,
) -> np.ndarray:
    """The shorter of the wire and host time of ``events``' ops on ``fabric``
    (``min(W, H)`` of :func:`stepped_time`: what of the two can fail to overlap, 0 for
    an op of one step, which pays both; 0 where the rings are not flat)."""
    return _costed(prog, fabric, groups, backend, steps, events, _overlap)


def wire_slopes(
    prog: Program,
    fabric: Fabric,
    groups: list[tuple[int, ...]] | None,
    backend: ReplayBackend,
    steps: Steps,
    events: np.ndarray,
) -> np.ndarray:
    """How much the time of each of ``events``' ops on ``fabric`` grows with its wire
    time (:func:`stepped_time`'s slope in ``W``; 1 where the rings are not flat)."""
    if not backend.flat_ring:
        return np.ones(events.size)
    return _costed(prog, fabric, groups, backend, steps, events, _slope)


def _costed(
    prog: Program,
    fabric: Fabric,
    groups: list[tuple[int, ...]] | None,
    backend: ReplayBackend,
    steps: Steps,
    events: np.ndarray | None,
    quantity: StepQuantity,
) -> np.ndarray:
    """``quantity`` (:func:`_op_time` or :func:`_overlap`) of each event's op, as
    :func:`modelled` places it; ops of a backend without flat rings cost
    :meth:`Fabric.time` (their overlap 0)."""
    tr = prog.trace
    cost_groups = prog.cost_groups if groups is None else groups
    ops = _op_names(prog, backend)
    colls, channels = _groups_of_roles(prog, cost_groups)
    flows = {role: link_flows(fabric, groups) for role, groups in colls.items()}
    rings = {role: ring_flows(fabric, groups) for role, groups in colls.items()}
    p2p = {role: send_flows(fabric, groups) for role, groups in channels.items()}

    def cost(op_code: int, size: float, group: tuple[int, ...], role: int) -> float:
        op = ops[op_code]
        is_p2p = op in ("send", "recv")
        if not backend.flat_ring:
            if quantity is _overlap:
                return 0.0
            return fabric.time(op, size, group, (p2p if is_p2p else flows).get(role, 1))
        if not group:
            return 0.0
        nodes = fabric.shape(group)[0]
        across = nodes > 1
        # one link out of a node: the replay's link takes its messages in the order they came
        on_link = (p2p if is_p2p else rings).get(role, 1)
        queued = is_p2p and fabric.nics_per_node == 1
        share = 1 if queued else max(1, -(-on_link // fabric.nics_per_node))
        terms = _step_terms(
            op,
            0.0 if op == "send" else size,
            2 if is_p2p else len(group),
            fabric.inter if across else fabric.intra,
            share if across else 1,
            fabric.algorithm,
            steps.latency(op, tr.role_names[role], nodes),
            steps.burst_bytes if across else 0.0,
        )
        return quantity(*terms)

    return _per_cost_key(prog, cost_groups, cost, events)


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
