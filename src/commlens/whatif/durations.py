"""How long each op lasts in a replay: as measured, or from the cost model of a fabric.

*Measured*: an instance starts, in the capture, when its last member issued
it (a p2p pair: when its send was issued) and its queue's previous instance
had ended; member ``e`` lasts from there to its own recorded end (never
less than 0). Fed to
the replay, these reproduce the captured timeline: the self-check.

*Modelled*: every member lasts the cost model's time
(:meth:`commlens.predict.topology.Fabric.time`) for the op's real message
size on its group's placement over nodes, the inter-node link shared by
the concurrent flows of the groups of its role
(:func:`commlens.predict.topology.link_flows`). Object collectives cost as
their tensor op (``all_gather_object`` as ``all_gather``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from commlens.errors import UsageError
from commlens.predict.topology import Fabric, link_flows
from commlens.whatif.model import Program

OBJECT_AS_TENSOR = {
    "all_gather_object": "all_gather",
    "gather_object": "gather",
    "scatter_object": "scatter",
    "broadcast_object": "broadcast",
    "send_object": "send",
    "recv_object": "recv",
}


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
    its send was issued and the previous send had ended. So along a queue
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
    last_issue[pairs], first_end[pairs] = tr.t_issue[sends], tr.t_end[sends]
    release = _running_max(np.maximum(first_end, last_issue), prog.first_of_queue)
    before = np.r_[low, release[:-1]]
    start = np.where(prog.first_of_queue, last_issue, np.maximum(last_issue, before))
    return start, release


def measured(prog: Program) -> np.ndarray:
    """Seconds each event's op lasted in the capture, from its instance's start."""
    start, _ = _captured_starts(prog)
    return np.maximum(prog.trace.t_end - start[prog.inst], 0) / 1e9


def measured_release(prog: Program) -> np.ndarray:
    """Seconds from each instance's start until its queue was free again, as captured."""
    start, release = _captured_starts(prog)
    return (release - start) / 1e9


def instance_roles(prog: Program) -> np.ndarray:
    """Role code of each instance (that of its first member)."""
    roles = np.zeros(prog.instances, dtype=np.int64)
    roles[prog.inst[::-1]] = prog.trace.role[::-1]
    return roles


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


def modelled(
    prog: Program,
    fabric: Fabric,
    groups: list[tuple[int, ...]] | None = None,
    flat: bool = False,
) -> np.ndarray:
    """Seconds each event's op lasts on ``fabric`` (the same for all members), each
    instance costed on ``groups[inst_group]`` (default: the run's own groups).

    ``flat`` (gloo): a collective whose group spans nodes runs one ring over all its
    members in rank order, at the inter-node rate, its edges that leave a node
    sharing that node's link (:func:`ring_flows`), not the hierarchical
    intra/inter split of :meth:`Fabric.time`. Sends share a node's link with the
    other sends of their role out of that node (:func:`send_flows`).
    """
    tr = prog.trace
    cost_groups = prog.cost_groups if groups is None else groups
    ops = np.array([OBJECT_AS_TENSOR.get(o, o) for o in tr.op_names], dtype=object)
    roles = instance_roles(prog)
    n_groups, n_roles = len(cost_groups), len(tr.role_names)
    groups_of_role: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for pair in np.unique(roles * n_groups + prog.inst_group).tolist():
        groups_of_role[pair // n_groups].add(cost_groups[pair % n_groups])
    flows = {role: link_flows(fabric, groups) for role, groups in groups_of_role.items()}
    rings = {role: ring_flows(fabric, groups) for role, groups in groups_of_role.items()}
    p2p = {role: send_flows(fabric, groups) for role, groups in groups_of_role.items()}
    ring = Fabric(
        inter=fabric.inter,
        intra=fabric.inter,
        gpus_per_node=1,
        algorithm=fabric.algorithm,
        nics_per_node=fabric.nics_per_node,
    )

    def cost(op: str, size: float, group: tuple[int, ...], role: int) -> float:
        if op in ("send", "recv"):
            return fabric.time(op, size, group, p2p[role])
        if flat and group and fabric.shape(group)[0] > 1:
            return ring.time(op, size, group, rings[role])
        return fabric.time(op, size, group, flows[role])

    sizes, size_of = np.unique(prog.inst_size, return_inverse=True)
    key = ((prog.inst_op * n_groups + prog.inst_group) * n_roles + roles) * sizes.size + size_of
    unique, which = np.unique(key, return_inverse=True)
    times = np.array(
        [
            cost(
                str(ops[k // (sizes.size * n_roles * n_groups)]),
                float(sizes[k % sizes.size]),
                cost_groups[k // (sizes.size * n_roles) % n_groups],
                k // sizes.size % n_roles,
            )
            for k in unique.tolist()
        ]
    )
    return times[which.ravel()][prog.inst]


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
    roles = instance_roles(prog)
    dp_groups = sorted(set(prog.inst_group[roles == dp_code].tolist()))
    sizes = {len(prog.cost_groups[g]) for g in dp_groups}
    if len(sizes) != 1:
        raise UsageError(f"--dp: the run's dp groups differ in size ({sorted(sizes)})")
    (n,) = sizes
    if dp < n or dp % n:
        raise UsageError(f"--dp {dp} must be a multiple of the run's dp degree {n}")
    copies, world = dp // n, tr.world_size
    groups = list(prog.cost_groups)
    for g in dp_groups:
        groups[g] = tuple(r + k * world for k in range(copies) for r in prog.cost_groups[g])
    return groups, world * copies
