"""The run as its own calibration: per-op CPU terms fitted from its measured op times.

An op's measured service time on the run's own link is its wire time (the
cost model's, on the profile of that link) plus what the wire does not
explain: the backend's per-call work, copies and reductions on the CPU, the
completion path. Per *kind* of op (op, role, nodes its group spans) that rest
is fitted as ``alpha + beta·S`` (``S`` the op's message size) to the mean
residual at each size, with ``alpha, beta >= 0``: a CPU term is never
negative, so where the model already over-explains an op, the op gets none.
Each member of a collective keeps, on top, its lag behind its call's mean as
captured (the members of one collective end apart: a ring's last hop, a
completion path, a rank the host scheduled late); a send or receive, its
rank's mean lag for the kind.
On another network an op then lasts that network's wire time plus its
kind's CPU term and its rank's lag: only the link changes. A receive whose
term comes out negative (the own link's model over-explains it) by no more
than its wire time keeps that excess as a share of its wire time, which
scales with the link (:attr:`Calibration.wire_share`).

One link cannot tell a CPU cost per byte from a wire cost per byte (both
grow with ``S``); the fit charges the wire what the own link's profile says
and the CPU the rest, so the profile of the own link must be right for the
slope to carry over (an emulated link's recorded rate is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from commlens.analysis.codes import dense_codes
from commlens.optable import TENSOR_TWIN
from commlens.predict.profiles import NetworkProfile
from commlens.predict.topology import Fabric
from commlens.whatif.backend import GLOO_REPLAY
from commlens.whatif.costing import Steps, host_in_alpha, op_steps
from commlens.whatif.model import Program


@dataclass(frozen=True)
class OpTerm:
    """The fitted CPU term of one kind of op."""

    op: str
    role: str
    nodes: int
    """Nodes the op's group spans on the own link's placement (1: inside a node)."""
    alpha_s: float
    beta_s_per_byte: float
    calls: int
    """Calls the fit saw."""
    mean_residual_s: float
    """Mean of measured minus modelled service time over those calls."""
    step_latency_s: float = 0.0
    """Step latency the kind's ops pay per algorithm step (see :class:`Steps`)."""

    def to_dict(self) -> dict[str, object]:
        return dict(vars(self))


@dataclass(frozen=True)
class Calibration:
    """Per-event CPU terms of a run and the fit behind them."""

    extra_s: np.ndarray
    """Seconds each event's op gets on top of a network's wire time (never below 0)."""
    terms: list[OpTerm]
    wire_share: np.ndarray | None = None
    """Per event, the share of a network's wire time its op takes off (0 to 1): what the
    own link's model over-explains within the wire time (see :func:`_wire_share`), as a
    share of the wire, which scales with the link, not as seconds, which would cancel
    the host's time on a faster link; None where no op has one."""
    capped: tuple[np.ndarray, np.ndarray] | None = None
    """(events, seconds): the most :attr:`wire_share` takes off those events' ops on any
    link, what it took off on the own link (collectives; a receive has no cap)."""
    unhidden: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """(events, seconds, own): what those collectives took beyond the model on the own
    link (their kind's line and level at their size, in :attr:`extra_s`), and the shorter
    of their wire and host time there (:func:`~commlens.whatif.costing.unoverlapped`): the
    part of the two that did not overlap, which shrinks with the shorter one on another
    network and never grows (see :func:`_unhidden`); None where none has one."""

    def add_to(
        self,
        times: np.ndarray,
        wire_s: np.ndarray | None,
        shorter_s: np.ndarray | None = None,
        slope: np.ndarray | None = None,
    ) -> None:
        """Add the terms to ``times``, each event's op time on a network whose wire time
        per event is ``wire_s`` (needed only where :attr:`wire_share` is not None) and
        whose shorter of wire and host time is ``shorter_s`` for the events of
        :attr:`unhidden` (None: as on the own link). ``slope``, per event of
        :attr:`capped`, is how much its op's time grows with its wire time there (1 for a
        wire-bound op, ``1/k`` for a host-bound one of ``k`` steps): on a faster link
        the share takes off no less than its own link's seconds less that slope times
        the wire saved, so that the op is never longer on a faster link."""
        times += self.extra_s
        if self.wire_share is not None and wire_s is not None:
            off = self.wire_share * wire_s
            if self.capped is not None:
                events, cap = self.capped
                mine = off[events]
                if slope is not None:  # cap / share: the events' wire on the own link
                    own_wire = cap / self.wire_share[events]
                    np.maximum(mine, cap - slope * (own_wire - wire_s[events]), out=mine)
                off[events] = np.minimum(mine, cap)
            times -= off
        if self.unhidden is not None and shorter_s is not None:
            events, seconds, own = self.unhidden
            times[events] -= seconds * (1.0 - np.minimum(shorter_s / own, 1.0))


def _fit_line(sizes: np.ndarray, size_of: np.ndarray, resid: np.ndarray) -> tuple[float, float]:
    """``alpha, beta >= 0`` of ``resid ≈ alpha + beta·size``, by least squares on the
    mean residual per size weighted by its calls; the calls' sizes are
    ``sizes[size_of]`` (``sizes`` sorted and distinct)."""
    present, which = dense_codes(size_of)
    sizes, counts = sizes[present], np.bincount(which)
    mean = np.bincount(which, weights=resid) / counts
    w = counts.astype(float)
    if sizes.size > 1:
        x, y = sizes.astype(float), mean
        xm, ym = np.average(x, weights=w), np.average(y, weights=w)
        var = float(np.average((x - xm) ** 2, weights=w))
        beta = float(np.average((x - xm) * (y - ym), weights=w)) / var if var > 0 else 0.0
        alpha = ym - beta * xm
        if beta >= 0 and alpha >= 0:
            return float(alpha), beta
        if beta < 0:
            return max(float(ym), 0.0), 0.0
        beta = float(np.sum(w * x * y) / np.sum(w * x * x))
        return 0.0, max(beta, 0.0)
    return max(float(np.average(mean, weights=w)), 0.0), 0.0


ROUNDING = 1e-9
"""Relative slack of "no more than the wire time" (:func:`_wire_share`): an excess equal
to the wire time is within it, whatever the last bits of the means it was found with."""
LATENCY_BOUND = 0.5
"""An op is latency-bound on its own link when its wire time is at most this share of
its measured time: then what it took beyond one step's wire is the host's, with
little of the wire model's error in it (one step's share of it)."""


def _kinds(prog: Program, fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """(kind codes, kind of each event) of the run's events: a kind is (nodes its
    group spans, role, op)."""
    tr = prog.trace
    spans = np.array([fabric.shape(g)[0] if g else 1 for g in prog.cost_groups], dtype=np.int64)
    per_inst = spans[prog.inst_group] * len(tr.role_names) + prog.inst_role
    key = per_inst[prog.inst]
    del per_inst
    key *= len(tr.op_names)
    key += tr.op
    kinds, kind_of = dense_codes(key)
    return kinds, kind_of.astype(np.int32)  # 4 bytes an event: a run has few kinds


def _kind_name(prog: Program, code: int) -> tuple[str, str, int]:
    """(op, role, nodes) of a kind code."""
    tr = prog.trace
    n_ops, n_roles = len(tr.op_names), len(tr.role_names)
    name = tr.op_names[code % n_ops]
    return (
        TENSOR_TWIN.get(name, name),
        tr.role_names[code // n_ops % n_roles],
        int(code // (n_ops * n_roles)),
    )


def fit_steps(
    prog: Program,
    fabric: Fabric,
    measured_s: np.ndarray,
    wire_s: np.ndarray,
    steps: list[int],
    burst_bytes: float,
) -> Steps:
    """The step latency of each kind of op, from the events of ``steps`` only (the
    set-up window's first calls pay for connections and are no guide).

    ``wire_s`` is each event's time on the own link without step latency (a gloo
    run: its ops costed as :func:`~commlens.whatif.costing.modelled` does with
    flat rings). A host-bound op lasts its host time and one step's wire (see
    :class:`~commlens.whatif.costing.Steps`): a step's host latency is what is
    left of its op's measured time after one step's wire time on the own link, so
    a slow own link is not taken for a slow host. A kind whose ops of a size are
    latency-bound (:data:`LATENCY_BOUND`, on their medians) gets the median of
    that over their steps; the kinds the own link keeps wire-bound get the median
    over all latency-bound ops, 0 when there are none. Point-to-point ops are left
    out (they get that median): a send's measured time holds its wait for the
    messages before it on its channel, and a receive's runs from its send's start,
    so it holds how late the receiver came.
    """
    tr = prog.trace
    kinds, kind_of = _kinds(prog, fabric)
    k = op_steps(prog, fabric, GLOO_REPLAY)
    p2p = (prog.send_of >= 0)[prog.inst]
    candidates = np.flatnonzero((k > 0) & ~p2p & np.isin(tr.step, steps))
    del p2p
    picked = _host_bound(prog, kind_of, candidates, measured_s, wire_s)
    # a host-bound op lasts its host time plus one step's wire (Steps): what is left after it
    left = (measured_s[picked] - wire_s[picked] / k[picked]) / k[picked]
    per_step = np.maximum(left + _host_alphas(prog, fabric, picked), 0.0)
    kind_picked = kind_of[picked]
    del k, kind_of, left
    latency: dict[tuple[str, str, int], float] = {}
    pooled = []
    for j, code in enumerate(kinds.tolist()):
        pick = kind_picked == j
        if pick.any():
            latency[_kind_name(prog, code)] = float(np.median(per_step[pick]))
            pooled.append(per_step[pick])
    default = float(np.median(np.concatenate(pooled))) if pooled else 0.0
    return Steps(latency, default, burst_bytes)


def _host_bound(
    prog: Program,
    kind_of: np.ndarray,
    events: np.ndarray,
    measured_s: np.ndarray,
    wire_s: np.ndarray,
) -> np.ndarray:
    """Those of ``events`` whose kind's calls of their size are latency-bound: the median
    wire time at most :data:`LATENCY_BOUND` of the median measured time. Decided per
    (kind, size), not per call: per call it picks a kind's slow calls only
    (docs/whatif.md, "Step latency per (kind, size) on medians")."""
    sizes, size_of = _size_index(prog, events)
    key = kind_of[events].astype(np.int64) * sizes.size + size_of
    del size_of
    order = np.argsort(key, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(key[order])) + 1) if order.size else []
    bound = [
        g
        for g in groups
        if np.median(wire_s[events[g]]) <= LATENCY_BOUND * np.median(measured_s[events[g]])
    ]
    return np.sort(events[np.concatenate(bound)]) if bound else events[:0]


def _size_index(prog: Program, events: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the run's distinct message sizes, sorted; the index into them of each event's
    size, or of ``events``' only)."""
    sizes, inst_size_of = prog.size_levels
    return sizes, inst_size_of[prog.inst if events is None else prog.inst[events]]


def _host_alphas(prog: Program, fabric: Fabric, events: np.ndarray) -> np.ndarray:
    """Alpha of the link each of ``events``' ops crosses where its profile holds the
    host's latency (:func:`~commlens.whatif.costing.host_in_alpha`: the step latency
    is then the longer of the two, not added to it), else 0."""
    tr = prog.trace
    spans = np.array([fabric.shape(g)[0] if g else 1 for g in prog.cost_groups], dtype=np.int64)
    across = (spans[prog.inst_group] > 1)[prog.inst[events]]
    names = [TENSOR_TWIN.get(o, o) for o in tr.op_names]

    def alphas(profile: NetworkProfile) -> list[float]:
        return [profile.alpha(o) if host_in_alpha(profile) else 0.0 for o in names]

    table = np.array([alphas(fabric.intra), alphas(fabric.inter)])
    return table[across.astype(np.intp), tr.op[events]]


def fit_cpu_terms(
    prog: Program,
    fabric: Fabric,
    measured_s: np.ndarray,
    own_s: np.ndarray,
    steps: list[int],
    step_model: Steps | None = None,
    own_wire_s: np.ndarray | None = None,
    own_shorter: Callable[[np.ndarray], np.ndarray] | None = None,
    lags: bool = True,
) -> Calibration:
    """Fit the CPU term of every kind of op from the events of ``steps``.

    ``measured_s`` and ``own_s`` are each event's measured service time and
    the cost model's on the own link (``fabric``, with ``step_model``'s step
    latencies, which the terms list). A kind with no event in ``steps`` is
    fitted on all its events. With ``own_wire_s`` (each event's wire time on the own
    link), a receive's negative term becomes a share of the wire
    (:attr:`Calibration.wire_share`); with ``own_shorter`` (the shorter of the wire and
    host time there of the events it is given), a collective's positive term scales
    with that (:attr:`Calibration.unhidden`). With ``lags``, each member keeps its lag
    (:func:`_member_lags`).
    """
    tr = prog.trace
    kinds, kind_of = _kinds(prog, fabric)
    kept = np.isin(tr.step, steps)
    resid = measured_s - own_s
    del own_s  # freed here where the caller handed it over
    sizes, size_of = _size_index(prog)
    terms, alpha, beta = [], np.zeros(kinds.size), np.zeros(kinds.size)
    for k, code in enumerate(kinds.tolist()):
        mine = kind_of == k
        pick = mine & kept if (mine & kept).any() else mine
        alpha[k], beta[k] = _fit_line(sizes, size_of[pick], resid[pick])
        op, role, nodes = _kind_name(prog, code)
        terms.append(
            OpTerm(
                op=op,
                role=role or "-",
                nodes=nodes,
                alpha_s=float(alpha[k]),
                beta_s_per_byte=float(beta[k]),
                calls=int(pick.sum()),
                mean_residual_s=float(resid[pick].mean()),
                step_latency_s=step_model.latency(op, role, nodes) if step_model else 0.0,
            )
        )
    extra = beta[kind_of]
    extra *= prog.inst_size[prog.inst]
    extra += alpha[kind_of]
    rest = resid
    rest -= extra
    coll = (prog.send_of < 0)[prog.inst]
    # a collective's level: its kind's mean at its size, beyond the line
    level = np.zeros(rest.size)
    mine = np.flatnonzero(coll)  # a kind is all collectives or all p2p: means over its own
    wide = kinds.size * max(sizes.size, tr.world_size) >= 2**31
    by_size: np.ndarray = kind_of[mine].astype(np.int64 if wide else np.int32)
    by_size *= sizes.size
    by_size += size_of[mine]
    del size_of
    level[mine] = _rank_offsets(by_size, rest[mine], kept[mine])
    del mine, by_size
    unhidden = None if own_shorter is None else _unhidden(extra, level, coll, own_shorter)
    del coll
    extra += level
    below = np.flatnonzero(level < 0).astype(np.int32)  # for the wire's share, the rest freed
    below_level = level[below]
    del level
    key = kind_of.astype(np.int64) if wide else kind_of
    key *= tr.world_size
    key += tr.rank
    del kind_of
    if lags:
        extra += _member_lags(prog, key, rest, kept)
    del rest, resid, key
    if own_wire_s is None:
        return Calibration(extra, terms, unhidden=unhidden)
    receives = prog.recv_of[prog.inst] == np.arange(prog.inst.size)  # a gloo send has no wire
    cal = _wire_share(extra, terms, own_wire_s, receives, (below, below_level))
    return replace(cal, unhidden=unhidden)


def _unhidden(
    line: np.ndarray,
    level: np.ndarray,
    coll: np.ndarray,
    shorter: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(events, seconds, own shorter) of the collectives whose kind took more than the
    model at their size on the own link (``line`` plus a positive ``level``) where their
    wire and host time both count (``shorter(events)`` > 0): the two overlapped less than the
    model's all-but-one step. On another network that excess is a share of the shorter
    of the two, never more than on the own link (docs/whatif.md, "Calibration")."""
    extra = line + np.maximum(level, 0.0)
    events = np.flatnonzero(coll & (extra > 0)).astype(np.int32)
    own = shorter(events).astype(np.float32)
    both = own > 0
    events, own = events[both], own[both]
    if not events.size:
        return None
    return events, extra[events], own


def _wire_share(
    extra: np.ndarray,
    terms: list[OpTerm],
    wire_s: np.ndarray,
    receives: np.ndarray,
    below: tuple[np.ndarray, np.ndarray],
) -> Calibration:
    """The calibration with what the own link's model over-explains by no more than the
    wire time ``wire_s`` taken as a share of the wire, its seconds 0: a receive's
    negative term, and a collective's negative level (``below``: events and their
    kind's mean at their size; the members' lags stay in seconds), which takes off no
    more on a slower link than on its own (:attr:`Calibration.capped`).

    What the model over-explains within the wire time is the wire's, or the host's work
    that hid under the wire: on a link whose wire time is less it can be no more than
    that, and hidden host work does not grow with the wire. A receive's excess keeps
    scaling both ways (it is its wire's). Beyond the wire time it stays in seconds: the
    host's latency over-explained, not the wire (docs/whatif.md, "Calibration")."""
    over = np.flatnonzero((extra < 0) & receives)
    over = over[(wire_s[over] > 0) & (-extra[over] <= wire_s[over] * (1 + ROUNDING))]
    events, level = below
    wire = wire_s[events]
    fits = (wire > 0) & (-level <= wire * (1 + ROUNDING))
    del wire
    events, level = events[fits], level[fits]
    if not (over.size or events.size):
        return Calibration(extra, terms)
    share = np.zeros(extra.size)
    share[over] = np.minimum(-extra[over] / wire_s[over], 1.0)
    extra[over] = 0.0
    share[events] = np.minimum(-level / wire_s[events], 1.0)
    extra[events] -= level
    return Calibration(extra, terms, share, (events, -level) if events.size else None)


def _member_lags(prog: Program, key: np.ndarray, rest: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Per event, what it keeps beyond its kind's line and level: for a member of a
    collective, its lag behind its own instance's mean as captured (which member of that
    call ended late, and by how much); a send or receive, its rank's mean of ``rest`` for
    the kind (over the kept events; a pair's two ends are different kinds). Made in
    ``rest``'s memory.

    With each rank's mean lag instead, every call of a kind would have the same spread,
    where a later sync point waits for the latest of the call's members
    (docs/whatif.md, "Calibration")."""
    pairs = np.flatnonzero((prog.send_of >= 0)[prog.inst])
    pair_lags = _rank_offsets(key[pairs], rest[pairs], kept[pairs])
    count = np.maximum(np.bincount(prog.inst, minlength=prog.instances), 1)
    mean = np.bincount(prog.inst, weights=rest, minlength=prog.instances) / count
    del count
    lag = rest  # in place: the caller's ``rest`` is not needed again
    lag -= mean[prog.inst]
    del mean
    lag[pairs] = pair_lags
    return lag


def _rank_offsets(key: np.ndarray, rest: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Mean of ``rest`` per ``key`` (kind and rank) over the kept events (all where none is
    kept), per event: the members of one collective end apart (a ring's last hop, a rank's
    completion path), and each rank keeps its own lag."""
    keys, which = dense_codes(key)
    kept_n = np.bincount(which[kept], minlength=keys.size)
    all_n = np.bincount(which, minlength=keys.size)
    kept_sum = np.bincount(which, weights=np.where(kept, rest, 0.0), minlength=keys.size)
    all_sum = np.bincount(which, weights=rest, minlength=keys.size)
    mean = np.where(kept_n > 0, kept_sum / np.maximum(kept_n, 1), all_sum / np.maximum(all_n, 1))
    return mean[which]
