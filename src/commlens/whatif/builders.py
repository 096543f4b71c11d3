"""One builder of op times per ``--op-times`` choice: model, fit and delta.

A builder is made once per study from the run's program, its backend, its
own link and its measured op times; it then gives the
:class:`~commlens.whatif.optimes.OpTimes` of the run's own link and of any
network. Each applies, in order, the corrections of
:data:`~commlens.whatif.corrections.CORRECTIONS` that are switched on and that
its choice and the backend use, and lists what each assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from commlens.predict.networks import BURST_S
from commlens.predict.topology import Fabric
from commlens.whatif.backend import ReplayBackend
from commlens.whatif.calibrate import Calibration, OpTerm, fit_cpu_terms, fit_steps
from commlens.whatif.corrections import CORRECTIONS
from commlens.whatif.costing import (
    Steps,
    bucket_draws,
    link_wires,
    modelled,
    node_links,
    sending_nodes,
    unoverlapped,
    wire_pair,
    wire_slopes,
    wire_times,
)
from commlens.whatif.durations import link_waits, measured_release, worker_waits
from commlens.whatif.model import Program, release_captured_times
from commlens.whatif.optimes import Bucket, LinkUse, OpTimes

Groups = list[tuple[int, ...]]


@dataclass(frozen=True)
class Setting:
    """What a builder is given: the run and the corrections switched on."""

    prog: Program
    backend: ReplayBackend
    keep: list[int]
    """The steps whose ops the fits read."""
    own: Fabric | None
    """The run's own link and placement (None: unknown)."""
    own_burst: float
    """Bytes of the bucket of the run's own link (0: none)."""
    corrections: frozenset[str]

    def uses(self, name: str, mode: str) -> bool:
        """Whether correction ``name`` applies to op times of ``mode`` here."""
        c = next(c for c in CORRECTIONS if c.name == name)
        on = name in self.corrections and mode in c.modes
        return on and (self.backend.flat_ring or not c.gloo_only)


class ModelTimes:
    """``--op-times model``: the cost model's time for each op's real size alone."""

    mode = "model"

    def __init__(self, setting: Setting, measured_s: np.ndarray) -> None:
        self.setting = setting
        self.bucket = setting.uses("link-bucket", self.mode)
        self.steps = Steps(burst_bytes=setting.own_burst if self.bucket else 0.0)
        self.terms: list[OpTerm] = []

    def own_link(self) -> OpTimes:
        """The op times on the run's own link and placement."""
        assert self.setting.own is not None
        return self.network(self.setting.own, self.setting.prog.cost_groups, self.steps, own=True)

    def on(self, fabric: Fabric, groups: Groups, burst: float) -> OpTimes:
        """The op times on ``fabric`` (its inter-node link's bucket ``burst`` bytes)."""
        steps = replace(self.steps, burst_bytes=burst if self.bucket else 0.0)
        return self.network(fabric, groups, steps)

    def network(self, fabric: Fabric, groups: Groups, steps: Steps, own: bool = False) -> OpTimes:
        """The op times on ``fabric`` with ``steps`` (``own``: the run's own link), and
        where its link has a bucket, with that bucket empty too."""
        use = self.link_use(fabric, groups, steps.burst_bytes)
        drained = None
        if use is not None and use.bucket is not None:
            drained = self.times(fabric, groups, replace(steps, burst_bytes=0.0), own)
        return OpTimes(self.times(fabric, groups, steps, own), None, use, drained)

    def times(self, fabric: Fabric, groups: Groups, steps: Steps, own: bool) -> np.ndarray:
        """Each event's duration on ``fabric``: the model's, corrected, never below 0."""
        times = modelled(self.setting.prog, fabric, groups, self.setting.backend, steps)
        self.correct(times, fabric, groups, steps, own)
        np.maximum(times, 0.0, out=times)
        return times

    def correct(
        self, times: np.ndarray, fabric: Fabric, groups: Groups, steps: Steps, own: bool
    ) -> None:
        """Apply the builder's corrections to the model's ``times`` (none here)."""

    def link_use(self, fabric: Fabric, groups: Groups, burst: float) -> LinkUse | None:
        """How the ops hold the links on ``fabric`` (gloo: workers, node links, wire)."""
        setting = self.setting
        if not setting.backend.flat_ring:
            return None
        prog = setting.prog
        wire, queued = wire_pair(prog, fabric, groups, burst)
        links = node_links(prog, fabric) if setting.backend.node_links else None
        bucket, link_wire = None, None
        if burst > 0:  # the link-bucket correction on: the buckets' levels through the replay
            drawn, credit = bucket_draws(prog, fabric, groups, burst)
            capacity = burst * fabric.inter.beta("all_reduce")
            bucket = Bucket(capacity, drawn, credit, sending_nodes(prog, fabric, groups))
        elif links is not None:
            link_wire = link_wires(prog, fabric, groups, links)
        return LinkUse(setting.backend.workers, links, wire, queued, bucket, link_wire)

    def applied(self) -> list[str]:
        """The corrections applied, by name."""
        return [c.name for c in CORRECTIONS if self.setting.uses(c.name, self.mode)]


def _step_model(setting: Setting, mode: str, measured_s: np.ndarray) -> Steps:
    """The own link's :class:`Steps`: its bucket, and the step latency fitted from the
    run where that correction applies."""
    burst = setting.own_burst if setting.uses("link-bucket", mode) else 0.0
    steps = Steps(burst_bytes=burst)
    if setting.own is None or not setting.uses("step-latency", mode):
        return steps
    prog, own = setting.prog, setting.own
    wire = modelled(prog, own, None, setting.backend, steps)
    return fit_steps(prog, own, measured_s, wire, setting.keep, burst)


class FitTimes(ModelTimes):
    """``--op-times fit``: the model's time plus the CPU terms fitted from the run
    against its own link (:mod:`~commlens.whatif.calibrate`)."""

    mode = "fit"

    def __init__(self, setting: Setting, measured_s: np.ndarray) -> None:
        super().__init__(setting, measured_s)
        took = np.maximum(measured_s, 0.0, out=measured_s)  # taken over: never below 0
        self.steps = _step_model(setting, self.mode, took)
        self.calibration: Calibration | None = None
        if setting.uses("cpu-terms", self.mode):
            self.calibration = self.fit(took)
            self.terms = self.calibration.terms

    def fit(self, took: np.ndarray) -> Calibration:
        """The CPU terms of the run's op kinds (``took``, the measured times, is taken
        over: the waits the replay adds again come out of it)."""
        setting, mode = self.setting, self.mode
        prog, own, backend, steps = setting.prog, setting.own, setting.backend, self.steps
        assert own is not None
        own_wire = None
        if backend.flat_ring:  # what the fit sees: each op's own time on the wire
            inst_wire = wire_times(prog, own, prog.cost_groups, steps.burst_bytes)
            if setting.uses("worker-waits", mode):
                took -= worker_waits(prog, inst_wire)
            own_wire = inst_wire[prog.inst] if setting.uses("wire-share", mode) else None
            del inst_wire
        if setting.uses("link-waits", mode) and backend.node_links:
            links = node_links(prog, own)
            if (links >= 0).any():
                took -= link_waits(prog, links)
        release_captured_times(prog.trace)  # read for the last time: freed before the fit

        def shorter(events: np.ndarray) -> np.ndarray:
            return unoverlapped(prog, own, None, backend, steps, events)

        return fit_cpu_terms(
            prog,
            own,
            took,
            modelled(prog, own, None, backend, steps),  # taken over: freed once read
            setting.keep,
            steps,
            own_wire,
            shorter if setting.uses("unhidden", mode) else None,
            lags=setting.uses("member-lags", mode),
        )

    def correct(
        self, times: np.ndarray, fabric: Fabric, groups: Groups, steps: Steps, own: bool
    ) -> None:
        cal = self.calibration
        if cal is None:
            return
        prog, backend = self.setting.prog, self.setting.backend
        wire = None
        if cal.wire_share is not None:
            wire = wire_times(prog, fabric, groups, steps.burst_bytes)[prog.inst]
        shorter = slope = None
        if cal.unhidden is not None and not own:  # on its own link: as fitted
            shorter = unoverlapped(prog, fabric, groups, backend, steps, cal.unhidden[0])
        if cal.capped is not None and not own:
            slope = wire_slopes(prog, fabric, groups, backend, steps, cal.capped[0])
        cal.add_to(times, wire, shorter, slope)


class DeltaTimes(ModelTimes):
    """``--op-times delta``: each op's measured time plus the model's difference between
    the network and the run's own link (never below 0)."""

    mode = "delta"

    def __init__(self, setting: Setting, measured_s: np.ndarray) -> None:
        super().__init__(setting, measured_s)
        assert setting.own is not None
        # delta keeps a member's end before its start as captured (a send whose bytes
        # went out as the ready notice arrived, just before the message that carried it
        # was seen received), so that its own link replays the capture itself
        self.floor = np.minimum(measured_s, 0.0)
        self.measured = np.maximum(measured_s, 0.0)
        self.steps = _step_model(setting, self.mode, self.measured)
        own_times = modelled(setting.prog, setting.own, None, setting.backend, self.steps)
        self.base = self.measured + self.floor - own_times
        # when each instance freed its queue in the capture: made once (the trace's
        # times are not kept past the builder: model.release_captured_times)
        self.captured_release = measured_release(setting.prog)

    def network(self, fabric: Fabric, groups: Groups, steps: Steps, own: bool = False) -> OpTimes:
        prog = self.setting.prog
        times = modelled(prog, fabric, groups, self.setting.backend, steps)
        times += self.base
        np.maximum(times, self.floor, out=times)
        return OpTimes(times, self.release(times))

    def release(self, times: np.ndarray) -> np.ndarray:
        """When each instance frees its queue: as captured, later by the largest change of
        its members (never before its start)."""
        prog = self.setting.prog
        change = np.full(prog.instances, -np.inf)
        np.maximum.at(change, prog.inst, times - self.measured)
        return np.maximum(self.captured_release + change, 0.0)


BUILDERS: dict[str, type[ModelTimes]] = {"fit": FitTimes, "model": ModelTimes, "delta": DeltaTimes}
"""The builder of each ``--op-times`` choice."""


def bucket_assumption(own_burst: float) -> str:
    """What the replay assumes of emulated links' buckets."""
    return (
        f"an emulated link has a token bucket: {own_burst:,.0f} bytes on the run's own "
        f"link (as recorded), {BURST_S * 1e3:g} ms of its rate (at least 8 frames) on an "
        "emulated link named by its rate; the replay keeps each node's bucket: full at "
        "the start, drained by the bytes that leave the node (those it covers cross at "
        "the rate of the link under the shaper, loopback's), refilled at the link's rate "
        "while it idles (--op-times delta: each op finds it full)"
    )


def step_assumption(steps: Steps) -> str:
    """What the replay assumes of gloo's step latency, with the latencies fitted."""
    kinds = ", ".join(
        f"{op} {role or '-'} over {nodes} node(s) {lat * 1e6:,.0f} us"
        for (op, role, nodes), lat in sorted(steps.latency_s.items())
    )
    return (
        "each algorithm step of a gloo op lasts its wire time plus the backend's step "
        "latency on this host (thread wake-up, syscalls, copies and reductions) plus the "
        "link's alpha (a profile fitted by bench --fit: its wire time plus the longer of "
        "the step latency and alpha, its alpha holding its host's latency); the latency "
        "is fitted from the run's latency-bound ops, less their wire time on the run's "
        "own link, and kept on every network: "
        f"{kinds}; other ops {steps.default_latency_s * 1e6:,.0f} us (their median)"
    )
