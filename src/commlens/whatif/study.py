"""One what-if question: a run replayed as captured (the self-check) and on each network."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from commlens.errors import UsageError
from commlens.optable import GLOO
from commlens.predict.networks import (
    BURST_S,
    UNSHAPED,
    emulated_profile,
    link_burst,
    network_profile,
    network_profiles,
)
from commlens.predict.profiles import NetworkProfile, get_profile
from commlens.predict.topology import Fabric
from commlens.whatif.calibrate import Calibration, OpTerm, fit_cpu_terms, fit_steps
from commlens.whatif.durations import (
    Steps,
    elapsed,
    link_waits,
    measured_release,
    modelled,
    node_links,
    scaled_groups,
    wire_pair,
    wire_times,
    worker_waits,
)
from commlens.whatif.model import Program, build_program
from commlens.whatif.replay import replay
from commlens.whatif.results import Figures, figures
from commlens.whatif.source import Trace, read_trace

StepRange = tuple[int | None, int | None]


@dataclass(frozen=True)
class Placement:
    """Where the replay puts the ranks and which links and algorithm it charges."""

    ranks_per_node: int
    nodes: int
    intra: str
    algorithm: str
    source: str
    """Why this placement: the run's own, or the user's flags."""


@dataclass(frozen=True)
class SelfCheck:
    """How well the replay with measured op durations reproduces the capture."""

    max_step_error: float
    """Largest relative difference of a kept step's time."""
    max_event_error_s: float
    """Largest difference of an op's end in the kept steps, seconds."""

    @property
    def line(self) -> str:
        return (
            f"replay with measured op times reproduces the captured steps within "
            f"{self.max_step_error:.3%} (ops' ends within {self.max_event_error_s * 1e6:.1f} us)"
        )


@dataclass
class Answer:
    """One network's replay."""

    name: str
    profile: NetworkProfile | None
    """None for the captured network (measured op times)."""
    figures: Figures


@dataclass
class Study:
    trace: Trace
    placement: Placement
    check: SelfCheck
    captured: Answer
    answers: list[Answer]
    assumptions: list[str] = field(default_factory=list)
    clock_shifts: dict[int, int] = field(default_factory=dict)
    """rank -> ns its clock was corrected by from the trace's own order (non-zero only)."""
    own_link: Answer | None = None
    """The cost model on the run's own link and placement: its error is the model's."""
    op_times: str = "model"
    """How op times on the networks were found (see :data:`OP_TIMES`)."""
    calibration: list[OpTerm] = field(default_factory=list)
    """The CPU terms fitted from the run (``op_times == "fit"``)."""

    @property
    def model_error(self) -> float | None:
        """(model on the own link − captured) / captured, median step times."""
        if self.own_link is None or self.captured.figures.median_step_s <= 0:
            return None
        ours = self.own_link.figures.median_step_s
        return ours / self.captured.figures.median_step_s - 1.0

    def speedup(self, answer: Answer) -> float:
        ours = answer.figures.median_step_s
        return self.captured.figures.median_step_s / ours if ours > 0 else float("inf")


def kept_steps(trace: Trace, steps: StepRange | None) -> list[int]:
    """The steps the figures cover: ``steps`` (first, stop), else all training steps
    (not the set-up window, step -1) but the first."""
    present = sorted(set(trace.step_index.tolist()))
    if steps is None:
        training = [s for s in present if s >= 0] or present
        return training[1:] if len(training) > 1 else training
    first, stop = steps
    kept = [s for s in present if (first is None or s >= first) and (stop is None or s < stop)]
    if not kept:
        raise UsageError(f"--steps keeps none of the run's steps ({present[0]}..{present[-1]})")
    return kept


def placement_for(
    trace: Trace,
    nodes: int | None,
    ranks_per_node: int | None,
    intra: str | None,
    algorithm: str,
) -> Placement:
    """The placement asked for, else the run's own (one rank per node on a single host)."""
    world = trace.world_size
    topo = trace.manifest.get("topology") or {}
    captured_nodes = topo.get("nodes") if isinstance(topo, dict) else None
    if nodes is not None and ranks_per_node is not None and nodes * ranks_per_node != world:
        raise UsageError(
            f"--nodes {nodes} x --ranks-per-node {ranks_per_node} is not the run's {world} ranks"
        )
    if nodes is not None:
        if nodes < 1 or world % nodes:
            raise UsageError(f"--nodes {nodes} must be a positive divisor of the {world} ranks")
        per, source = world // nodes, "--nodes"
    elif ranks_per_node is not None:
        if ranks_per_node < 1 or world % ranks_per_node:
            raise UsageError(
                f"--ranks-per-node {ranks_per_node} must be a positive divisor of the {world} ranks"
            )
        per, source = ranks_per_node, "--ranks-per-node"
    elif isinstance(captured_nodes, int) and captured_nodes > 1 and world % captured_nodes == 0:
        per, source = world // captured_nodes, "the run's emulated nodes"
    else:
        per, source = 1, "one rank per node (the run had no nodes of its own)"
    backend = str(trace.manifest.get("backend") or "")
    intra_name = intra or ("loopback" if backend == "gloo" else "nvlink")
    return Placement(per, world // per, intra_name, algorithm, source)


def recorded_burst(trace: Trace) -> float:
    """Bytes of the bucket of the link the run was captured on (0: none recorded; runs
    shaped with tbf recorded it as ``tbf_burst_bytes``)."""
    topo = trace.manifest.get("topology")
    if not isinstance(topo, dict):
        return 0.0
    burst = topo.get("burst_bytes", topo.get("tbf_burst_bytes"))
    return float(burst) if isinstance(burst, int) and burst > 0 else 0.0


def own_link(trace: Trace, spec: str | None) -> tuple[NetworkProfile, int] | None:
    """The profile of the link the run was captured on, and its ranks per node.

    ``spec`` (a :func:`network_profile` spec, e.g. a file ``bench --fit`` wrote)
    wins; else an emulated link's recorded rate; else unshaped for an emulated
    run without one; else loopback for a gloo run on one host; else None (unknown).
    """
    topo = trace.manifest.get("topology")
    topo = topo if isinstance(topo, dict) else {}
    nodes = topo.get("nodes")
    nodes = nodes if isinstance(nodes, int) and nodes >= 1 else 1
    per = trace.world_size // nodes if trace.world_size % nodes == 0 else 1
    if spec:
        return network_profile(spec), per
    rate = topo.get("link_bits_per_s")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
        label = f"emulated-{topo.get('link') or rate}"
        why = "the run's emulated link, its rate as recorded in the manifest's topology"
        return emulated_profile(float(rate), label, why), per
    if nodes > 1:
        return network_profile(UNSHAPED), per
    if nodes == 1 and trace.manifest.get("backend") == "gloo":
        return get_profile("loopback"), trace.world_size
    return None


def self_check(
    prog: Program, steps: list[int], times: np.ndarray | None = None
) -> tuple[SelfCheck, Answer]:
    """Replay with the captured op times (``times``: :func:`elapsed`'s, when already
    found; a member that ended before its instance started ends there too); how far it
    lands from the capture."""
    tr = prog.trace
    tl = replay(prog, elapsed(prog) if times is None else times, measured_release(prog))
    cap = (tr.step_end - tr.step_start) / 1e9
    rep = tl.step_marks[1::2] - tl.step_marks[0::2]
    kept = np.isin(tr.step_index, steps)
    rel = np.abs(rep - cap)[kept] / np.maximum(cap[kept], 1e-9)
    ev = np.abs(tl.end - (tr.t_end - prog.t0_ns) / 1e9)[np.isin(tr.step, steps)]
    check = SelfCheck(float(rel.max()) if rel.size else 0.0, float(ev.max()) if ev.size else 0.0)
    return check, Answer("captured", None, figures(prog, tl, steps))


ASSUMPTIONS = (
    "compute between communication calls keeps its measured length on every network",
    "a collective starts when its last member issued it and the previous op on its group "
    "ended; a point-to-point pair starts when both its send and its receive were issued "
    "(a send the capture saw end before its receive was issued is eager: it starts when "
    "issued) and the previous pair on its channel ended; its receive ends when the data "
    "has arrived",
    "async ops without a recorded wait (DDP's buckets, waited from C++) are waited at the last "
    "issue of their burst on the group, as DDP's backward waits for its buckets at its end",
    "op times on a network come from the alpha-beta cost model (commlens predict's) for the "
    "op's real message size; all groups of a role share a node's inter-node link",
)


FLAT_RING = (
    "gloo: a collective whose group spans nodes runs one flat ring over its members in rank "
    "order at the inter-node rate (gloo has no hierarchical algorithm); the ring's edges that "
    "leave a node share its link; a reduce-scatter costs an all-reduce (gloo has no native "
    "one); a send, like its receive, lasts until the link has carried its bytes (on average "
    "a send finds the socket buffer still holding the message before it and waits for the "
    "wire), and the channel carries one message at a time; a message does not overtake "
    "one on its node's link (one that starts while another is on it goes after it); a "
    f"group runs up to {GLOO.workers} ops at once (gloo's worker threads), the later one's "
    "bytes after the earlier's on the link"
)

OP_TIMES = ("fit", "model", "delta")
"""How an op's time on a network is found: that network's cost-model time plus the
op kind's CPU term fitted from the run (fit; the cost model alone where the own
link is unknown), the cost model's time alone (model), or the measured time plus
the model's difference between that network and the own link (delta)."""

OP_TIME_ASSUMPTIONS = {
    "fit": "an op's time on a network is that network's cost-model time for the op's real "
    "message size plus its kind's CPU term (alpha + beta x size per op, role and node span), "
    "fitted from the run's own measured op times minus the model's on its own link: only the "
    "link changes (a send or receive the own link's model over-explains keeps that excess as "
    "a share of its wire time, not as seconds); all groups of a role share a node's "
    "inter-node link",
    "model": ASSUMPTIONS[-1],
    "delta": "an op's time on a network is its measured time plus the cost model's difference "
    "between that network and the run's own link (never below 0): the software and "
    "CPU costs of each op are kept; all groups of a role share a node's inter-node link",
}


def delta_release(prog: Program, times: np.ndarray, measured_s: np.ndarray) -> np.ndarray:
    """When each instance frees its queue in a replay with ``times`` made of the
    measured times ``measured_s`` plus changes (``--op-times delta``): as captured,
    later by the largest change of its members (never before its start)."""
    change = np.full(prog.instances, -np.inf)
    np.maximum.at(change, prog.inst, times - measured_s)
    return np.maximum(measured_release(prog) + change, 0.0)


def link_assumptions(
    own_burst: float, profiles: list[NetworkProfile], step_model: Steps
) -> list[str]:
    """What the replay assumes of emulated links' buckets and of gloo's step latency."""
    out = []
    if own_burst or any(link_burst(p) for p in profiles):
        out.append(
            f"an emulated link lets its bucket through at once after it was idle: "
            f"{own_burst:,.0f} bytes on the run's own link (as recorded), "
            f"{BURST_S * 1e3:g} ms of its rate (at least 8 frames) on an emulated link "
            "named by its rate; every op across nodes is taken to find the bucket full (the "
            "link idled before it)"
        )
    if step_model.latency_s or step_model.default_latency_s:
        kinds = ", ".join(
            f"{op} {role or '-'} over {nodes} node(s) {lat * 1e6:,.0f} us"
            for (op, role, nodes), lat in sorted(step_model.latency_s.items())
        )
        out.append(
            "each algorithm step of a gloo op lasts its wire time plus the backend's step "
            "latency on this host (thread wake-up, syscalls, copies and reductions) plus the "
            "link's alpha (a profile fitted by bench --fit: its wire time plus the longer of "
            "the step latency and alpha, its alpha holding its host's latency); the latency "
            "is fitted from the run's latency-bound ops, less their wire time on the run's "
            "own link, and kept on every network: "
            f"{kinds}; other ops {step_model.default_latency_s * 1e6:,.0f} us (their median)"
        )
    return out


def run_study(
    path: str | Path,
    nets: str,
    *,
    steps: StepRange | None = None,
    nodes: int | None = None,
    ranks_per_node: int | None = None,
    intra: str | None = None,
    algorithm: str = "ring",
    captured_net: str | None = None,
    op_times: str = "fit",
    dp: int | None = None,
) -> Study:
    """Replay the run in ``path`` as captured, on its own link and on every network of ``nets``."""
    if op_times not in OP_TIMES:
        raise UsageError(f"unknown --op-times {op_times!r}; expected one of {', '.join(OP_TIMES)}")
    profiles = network_profiles(nets)  # a bad network is refused before the run is read
    trace = read_trace(path)
    place = placement_for(trace, nodes, ranks_per_node, intra, algorithm)
    intra_profile = get_profile(place.intra)
    keep = kept_steps(trace, steps)
    own = own_link(trace, captured_net)
    if own is None and op_times == "delta":
        raise UsageError("--op-times delta needs the profile of the run's own link: give --profile")
    used = op_times if own is not None else "model"
    prog = build_program(trace)
    flat = trace.manifest.get("backend") == "gloo"
    took = elapsed(prog)
    check, captured = self_check(prog, keep, took)
    # measured: never below 0; delta keeps a member's end before its start as captured (a
    # send whose bytes went out as the ready notice arrived, just before the message that
    # carried it was seen received), so that its own link replays the capture itself
    floor = np.minimum(took, 0.0) if used == "delta" else 0.0
    np.maximum(took, 0.0, out=took)
    own_answer, base, terms = None, np.zeros(prog.inst.size), []
    calibration: Calibration | None = None
    own_burst = recorded_burst(trace)
    step_model = Steps(burst_bytes=own_burst)
    if own is not None:
        fabric = Fabric(
            inter=own[0], intra=intra_profile, gpus_per_node=own[1], algorithm=algorithm
        )
        if flat and used != "model":
            wire = modelled(prog, fabric, flat=flat, steps=step_model)
            step_model = fit_steps(prog, fabric, took, wire, keep, own_burst)
            del wire
        own_times = modelled(prog, fabric, flat=flat, steps=step_model)
        own_links = node_links(prog, fabric) if flat else None
        if used == "delta":
            base = took + floor - own_times
            own_times += base
        elif used == "fit":
            own_wire = None
            if flat:  # what the fit sees: each op's own time on the wire
                inst_wire = wire_times(prog, fabric, prog.cost_groups, own_burst)
                took -= worker_waits(prog, inst_wire)
                own_wire = inst_wire[prog.inst]
                del inst_wire
            if own_links is not None and (own_links >= 0).any():
                took -= link_waits(prog, own_links)

            def shorter(events: np.ndarray) -> np.ndarray:
                return modelled(
                    prog, fabric, flat=flat, steps=step_model, events=events, shorter=True
                )

            calibration = fit_cpu_terms(
                prog, fabric, took, own_times, keep, step_model, own_wire, shorter
            )
            calibration.add_to(own_times, own_wire)  # its own link: as fitted
            terms = calibration.terms
            del own_wire
        np.maximum(own_times, floor, out=own_times)
    if used != "delta":
        del took  # only delta's releases need the measured times again
    if own is not None:
        release = delta_release(prog, own_times, took) if used == "delta" else None
        if flat and used != "delta":
            wire, queued = wire_pair(prog, fabric, prog.cost_groups, own_burst)
            timeline = replay(prog, own_times, None, own_links, GLOO.workers, wire, queued)
            del wire, queued
        else:
            timeline = replay(prog, own_times, release)
        del own_times, release
        own_answer = Answer(own[0].name, own[0], figures(prog, timeline, keep))
        del timeline
    groups, world = prog.cost_groups, trace.world_size
    if dp is not None:
        groups, world = scaled_groups(prog, dp)
    answers = []
    for profile in profiles:
        fabric = Fabric(
            inter=profile,
            intra=intra_profile,
            gpus_per_node=place.ranks_per_node,
            algorithm=algorithm,
        )
        on = replace(step_model, burst_bytes=link_burst(profile))
        times = modelled(prog, fabric, groups, flat=flat, steps=on)
        if calibration is not None:
            shared = calibration.wire_share is not None
            event_wire = (
                wire_times(prog, fabric, groups, on.burst_bytes)[prog.inst] if shared else None
            )
            unhidden = calibration.unhidden
            target_shorter = (
                None
                if unhidden is None
                else modelled(
                    prog, fabric, groups, flat=flat, steps=on, events=unhidden[0], shorter=True
                )
            )
            calibration.add_to(times, event_wire, target_shorter)
            del event_wire, target_shorter
        else:
            times += base
        np.maximum(times, floor, out=times)
        release = delta_release(prog, times, took) if used == "delta" else None
        if flat and used != "delta":
            links = node_links(prog, fabric)
            wire, queued = wire_pair(prog, fabric, groups, on.burst_bytes)
            timeline = replay(prog, times, None, links, GLOO.workers, wire, queued)
            del links, wire, queued
        else:
            timeline = replay(prog, times, release)
        del times, release
        answers.append(Answer(profile.name, profile, figures(prog, timeline, keep)))
        del timeline
    shifts = {r: int(v) for r, v in enumerate(prog.clock_shifts.tolist()) if v}
    ring = [FLAT_RING] if flat else []
    assumptions = [*ASSUMPTIONS[:-1], *ring, *link_assumptions(own_burst, profiles, step_model)]
    assumptions.append(OP_TIME_ASSUMPTIONS[used])
    if used != op_times:
        assumptions.append(
            f"--op-times {op_times} needs the run's own link, which is unknown (give "
            "--profile): the cost model's times are used alone"
        )
    if dp is not None:
        assumptions.append(
            f"--dp {dp}: the job is repeated to {world} ranks; its dp groups grow to {dp} ranks "
            "(replica k holds ranks r + k x the run's world, placed in order on the nodes), "
            "every replica does the captured per-rank work and arrives like the captured ranks; "
            "only the captured ranks are replayed, the own-link row stays at the captured scale"
        )
    return Study(
        trace,
        place,
        check,
        captured,
        answers,
        assumptions,
        clock_shifts=shifts,
        own_link=own_answer,
        op_times=used,
        calibration=terms,
    )
