"""One what-if question: a run replayed as captured (the self-check) and on each network."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from commlens.errors import UsageError
from commlens.predict.networks import (
    UNSHAPED,
    emulated_profile,
    link_burst,
    network_profile,
    network_profiles,
)
from commlens.predict.profiles import NetworkProfile, get_profile
from commlens.predict.topology import Fabric
from commlens.whatif import chunked, streams
from commlens.whatif.backend import replay_backend
from commlens.whatif.builders import (
    BUILDERS,
    ModelTimes,
    Setting,
    bucket_assumption,
    step_assumption,
)
from commlens.whatif.calibrate import OpTerm
from commlens.whatif.corrections import CORRECTIONS, corrections
from commlens.whatif.costing import scaled_groups
from commlens.whatif.durations import elapsed
from commlens.whatif.model import Program, build_program, release_captured_times
from commlens.whatif.optimes import OpTimes, measured_times
from commlens.whatif.replay import replay
from commlens.whatif.results import Figures, Tally, tally
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
    tally: Tally | None = field(default=None, repr=False)
    """What :attr:`figures` were made of (a chunk's answers join by it)."""

    @classmethod
    def of(cls, name: str, profile: NetworkProfile | None, tally: Tally) -> Answer:
        return cls(name, profile, tally.figures(), tally)


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
    corrections: list[str] = field(default_factory=list)
    """The corrections applied to the op times, by name (see
    :data:`~commlens.whatif.corrections.CORRECTIONS`)."""
    chunks: int = 1
    """The chunks of steps the run was replayed in (:mod:`~commlens.whatif.chunked`)."""
    events: int = -1
    """The run's events (-1: its trace's; a run replayed by chunks holds none)."""

    @property
    def event_count(self) -> int:
        return self.events if self.events >= 0 else self.trace.events

    @property
    def model_error(self) -> float | None:
        """(model on the own link − captured) / captured, median step times."""
        if self.own_link is None or self.captured.figures.median_step_s <= 0:
            return None
        ours = self.own_link.figures.median_step_s
        return ours / self.captured.figures.median_step_s - 1.0

    @property
    def reference(self) -> Answer:
        """What the networks' speedups are against: the own-link replay (the model on the
        run's own link: model against model), else the captured run where the own link
        is unknown."""
        return self.own_link if self.own_link is not None else self.captured

    def speedup(self, answer: Answer) -> float:
        """The reference's median step over ``answer``'s (see :attr:`reference`)."""
        ours = answer.figures.median_step_s
        return self.reference.figures.median_step_s / ours if ours > 0 else float("inf")


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
    world: int | None = None,
) -> Placement:
    """The placement asked for, else the run's own (one rank per node on a single host),
    of ``world`` ranks: the run's, or its scale-out's (``--dp``), which ``--nodes`` and
    ``--ranks-per-node`` count; by default the scale-out keeps the run's ranks a node."""
    captured = trace.world_size
    world = captured if world is None else world
    whose = "the run's" if world == captured else "the scale-out's"
    topo = trace.manifest.get("topology") or {}
    captured_nodes = topo.get("nodes") if isinstance(topo, dict) else None
    if nodes is not None and ranks_per_node is not None and nodes * ranks_per_node != world:
        raise UsageError(
            f"--nodes {nodes} x --ranks-per-node {ranks_per_node} is not {whose} {world} ranks"
        )
    if nodes is not None:
        if nodes < 1 or world % nodes:
            raise UsageError(f"--nodes {nodes} must be a positive divisor of {whose} {world} ranks")
        per, source = world // nodes, "--nodes"
    elif ranks_per_node is not None:
        if ranks_per_node < 1 or world % ranks_per_node:
            raise UsageError(
                f"--ranks-per-node {ranks_per_node} must be a positive divisor of {whose} "
                f"{world} ranks"
            )
        per, source = ranks_per_node, "--ranks-per-node"
    elif isinstance(captured_nodes, int) and captured_nodes > 1 and captured % captured_nodes == 0:
        per, source = captured // captured_nodes, "the run's emulated nodes"
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
    tl = replay(prog, measured_times(prog, times))
    cap = (tr.step_end - tr.step_start) / 1e9
    rep = tl.step_marks[1::2] - tl.step_marks[0::2]
    kept = np.isin(tr.step_index, steps)
    rel = np.abs(rep - cap)[kept] / np.maximum(cap[kept], 1e-9)
    ev = np.abs(tl.end - (tr.t_end - prog.t0_ns) / 1e9)[np.isin(tr.step, steps)]
    check = SelfCheck(float(rel.max()) if rel.size else 0.0, float(ev.max()) if ev.size else 0.0)
    return check, Answer.of("captured", None, tally(prog, tl, steps))


def replay_captured(path: str | Path, steps: StepRange | None) -> tuple[Trace, SelfCheck, Answer]:
    """The run in ``path`` replayed with its own op times: its trace (a run larger than a
    chunk: without its events, :mod:`~commlens.whatif.chunked`), the self-check and the
    figures of the steps kept (``steps``, else :func:`kept_steps`'s)."""
    with chunked.chunked_run(path) as (view, run):
        if run is not None:

            def one(
                trace: Trace, keep: list[int], checked: bool
            ) -> tuple[tuple[SelfCheck, Answer], bool]:
                prog = build_program(trace, clocks=not checked)
                return self_check(prog, keep), bool(prog.clock_shifts.any())

            parts = chunked.by_chunks(run, kept_steps(run.template, steps), one)
            if parts is not None:
                checks, answers = zip(*parts, strict=True)
                return run.template, _worst(checks), _joined_answer(list(answers))
        trace = read_trace(view)
        check, captured = self_check(build_program(trace), kept_steps(trace, steps))
        return trace, check, captured


def _worst(checks: Iterable[SelfCheck]) -> SelfCheck:
    """The self-check of a run of chunks of these ``checks``: the worst of each figure."""
    checks = list(checks)
    return SelfCheck(
        max(c.max_step_error for c in checks), max(c.max_event_error_s for c in checks)
    )


def _joined_answer(answers: list[Answer]) -> Answer:
    """One network's answer over a run's chunks (each chunk's answer on it, in step order)."""
    tallies = [a.tally for a in answers if a.tally is not None]
    return Answer.of(answers[0].name, answers[0].profile, Tally.join(tallies))


ASSUMPTIONS = (
    "compute between communication calls keeps its measured length on every network",
    "a collective starts when its last member issued it and the previous op on its group "
    "ended; a point-to-point pair starts when both its send and its receive were issued "
    "(a send the capture saw end before its receive was issued is eager: it starts when "
    "issued) and the previous pair on its channel ended; its receive ends when the data "
    "has arrived",
    "async ops without a recorded wait (DDP's buckets, waited from C++) are waited at the last "
    "issue of their burst on the group, as DDP's backward waits for its buckets at its end "
    "(with the next async op of their group where its wait was recorded, at that wait)",
)

OP_TIMES = tuple(BUILDERS)
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
    "model": "op times on a network come from the alpha-beta cost model (commlens predict's) "
    "for the op's real message size; all groups of a role share a node's inter-node link",
    "delta": "an op's time on a network is its measured time plus the cost model's difference "
    "between that network and the run's own link (never below 0): the software and "
    "CPU costs of each op are kept; all groups of a role share a node's inter-node link",
}


def study_assumptions(
    builder: ModelTimes,
    profiles: list[NetworkProfile],
    asked: str,
    dp: int | None,
    world: int,
) -> list[str]:
    """What the study's replays assume: the replay's model, the backend's, each
    correction applied with its figures, the op times' and the scale-out's."""
    setting, out = builder.setting, list(ASSUMPTIONS)
    if setting.backend.assumption:
        out.append(setting.backend.assumption)
    texts = {c.name: c.assumption for c in CORRECTIONS}
    for name in builder.applied():
        if name == "link-bucket":
            if setting.own_burst or any(link_burst(p) for p in profiles):
                out.append(bucket_assumption(setting.own_burst))
        elif name == "step-latency":
            if builder.steps.latency_s or builder.steps.default_latency_s:
                out.append(step_assumption(builder.steps))
        elif name != "cpu-terms":
            out.append(f"{name}: {texts[name]}")
    out.append(OP_TIME_ASSUMPTIONS[builder.mode])
    if builder.mode != asked:
        out.append(
            f"--op-times {asked} needs the run's own link, which is unknown (give "
            "--profile): the cost model's times are used alone"
        )
    if dp is not None:
        out.append(
            f"--dp {dp}: the job is repeated to {world} ranks; its dp groups grow to {dp} ranks "
            "(replica k holds ranks r + k x the run's world, placed in order on the nodes), "
            "every replica does the captured per-rank work and arrives like the captured ranks; "
            "only the captured ranks are replayed, the own-link row stays at the captured scale"
        )
    return out


def _answer(prog: Program, keep: list[int], profile: NetworkProfile, times: OpTimes) -> Answer:
    """The figures of the steps ``keep`` replayed with ``times`` on ``profile``."""
    return Answer.of(profile.name, profile, tally(prog, replay(prog, times), keep))


@dataclass(frozen=True)
class Question:
    """What a study asks of a run (:func:`run_study`'s arguments, checked)."""

    profiles: list[NetworkProfile]
    steps: StepRange | None
    nodes: int | None
    ranks_per_node: int | None
    intra: str | None
    algorithm: str
    captured_net: str | None
    op_times: str
    dp: int | None
    switched_on: frozenset[str]


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
    without: tuple[str, ...] = (),
) -> Study:
    """Replay the run in ``path`` as captured, on its own link and on every network of
    ``nets``, with the corrections of :data:`~commlens.whatif.corrections.CORRECTIONS` but
    those named in ``without``; a run larger than a chunk a chunk of steps at a time
    (:mod:`~commlens.whatif.chunked`)."""
    if op_times not in OP_TIMES:
        raise UsageError(f"unknown --op-times {op_times!r}; expected one of {', '.join(OP_TIMES)}")
    q = Question(
        network_profiles(nets),  # a bad network is refused before the run is read
        steps,
        nodes,
        ranks_per_node,
        intra,
        algorithm,
        captured_net,
        op_times,
        dp,
        corrections(without),
    )
    with chunked.chunked_run(path) as (view, run):
        if run is not None:
            template = run.template

            def one(trace: Trace, keep: list[int], checked: bool) -> tuple[Study, bool]:
                part = _study(path, trace, keep, q, whole_clocks=checked)
                # the chunk's events freed once it is answered
                return replace(part, trace=template), bool(part.clock_shifts)

            keep = kept_steps(template, steps)
            _refuse(template, q)  # before any chunk is replayed
            parts = chunked.by_chunks(run, keep, one)
            if parts is not None:
                return _joined(run, parts)
        trace = read_trace(view)
        return _study(path, trace, kept_steps(trace, steps), q)


def _refuse(trace: Trace, q: Question) -> None:
    """:class:`UsageError` where ``q`` cannot be asked of the run ``trace`` (a placement
    that does not divide its ranks, op times that need its own link's profile)."""
    if q.dp is None:
        placement_for(trace, q.nodes, q.ranks_per_node, q.intra, q.algorithm)
    if q.op_times == "delta" and own_link(trace, q.captured_net) is None:
        raise UsageError("--op-times delta needs the profile of the run's own link: give --profile")


def _study(
    path: str | Path, trace: Trace, keep: list[int], q: Question, whole_clocks: bool = False
) -> Study:
    """The study of ``trace`` (the run in ``path``, or a chunk of it whose clocks were
    checked on the whole run: ``whole_clocks``) over steps ``keep``."""
    dp, algorithm = q.dp, q.algorithm
    # a scale-out's placement counts its ranks, known once the program is built
    place = (
        placement_for(trace, q.nodes, q.ranks_per_node, q.intra, algorithm) if dp is None else None
    )
    own = own_link(trace, q.captured_net)
    _refuse(trace, q)
    prog = build_program(trace, clocks=not whole_clocks)
    groups, world = (prog.cost_groups, trace.world_size) if dp is None else scaled_groups(prog, dp)
    if place is None:
        place = placement_for(trace, q.nodes, q.ranks_per_node, q.intra, algorithm, world)
    backend = replay_backend(str(trace.manifest.get("backend") or ""))
    if backend.streams and streams.applies(trace, path):  # an imported NCCL run with kernels
        return streams.stream_study(path, prog, q.profiles, place, keep, dp)
    took = elapsed(prog)
    check, captured = self_check(prog, keep, took)
    intra_profile = get_profile(place.intra)
    own_fabric = None if own is None else Fabric(own[0], intra_profile, own[1], algorithm)
    setting = Setting(prog, backend, keep, own_fabric, recorded_burst(trace), q.switched_on)
    builder = BUILDERS[q.op_times if own is not None else "model"](setting, took)
    del took  # the builder holds what it needs of the measured times
    release_captured_times(trace)
    own_answer = None if own is None else _answer(prog, keep, own[0], builder.own_link())
    answers = []
    for profile in q.profiles:
        fabric = Fabric(profile, intra_profile, place.ranks_per_node, algorithm)
        answers.append(
            _answer(prog, keep, profile, builder.on(fabric, groups, link_burst(profile)))
        )
    return Study(
        trace,
        place,
        check,
        captured,
        answers,
        study_assumptions(builder, q.profiles, q.op_times, dp, world),
        clock_shifts={r: int(v) for r, v in enumerate(prog.clock_shifts.tolist()) if v},
        own_link=own_answer,
        op_times=builder.mode,
        calibration=builder.terms,
        corrections=builder.applied(),
    )


def _joined(run: chunked.Chunks, parts: list[Study]) -> Study:
    """The study of the run ``run`` of its chunks' studies ``parts``: their figures joined
    step by step, the worst of their self-checks, the first chunk's fits."""
    first = parts[0]
    check = _worst(p.check for p in parts)
    steps = sum(len(p.captured.figures.steps) for p in parts)
    line = (
        f"the run ({run.events:,} events) is replayed {len(parts)} chunk(s) of up to "
        f"{run.width} step(s) at a time, in bounded memory: each chunk starts with the last "
        "step of the chunk before (replayed, not counted) and its ranks where the capture "
        f"had them; each chunk's op times are fitted from its own steps ({steps} kept in "
        "all; the CPU terms and step latencies listed are the first chunk's)"
    )
    return Study(
        run.template,
        first.placement,
        check,
        _joined_answer([p.captured for p in parts]),
        [_joined_answer([p.answers[i] for p in parts]) for i in range(len(first.answers))],
        [*first.assumptions, line] if len(parts) > 1 else first.assumptions,
        clock_shifts=run.clock_shifts,
        own_link=None
        if first.own_link is None
        else _joined_answer([p.own_link for p in parts if p.own_link is not None]),
        op_times=first.op_times,
        calibration=first.calibration,
        corrections=first.corrections,
        chunks=len(parts),
        events=run.events,
    )
