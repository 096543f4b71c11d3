"""A :class:`~commlens.whatif.study.Study` as a report :class:`Document` (text, md, html, json)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from commlens.report.build import run_brief
from commlens.report.document import Column, Document, Section
from commlens.report.provenance import provenance_facts
from commlens.whatif.study import Answer, Study

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _table(rows: Sequence[Mapping[str, object]], columns: list[Column]) -> pa.Table:
    return pa.table({c.key: [r[c.key] for r in rows] for c in columns})


def _all(study: Study) -> list[Answer]:
    """The answers in table order: captured, the model on the run's own link, the networks."""
    own = [study.own_link] if study.own_link is not None else []
    return [study.captured, *own, *study.answers]


def _label(study: Study, a: Answer) -> str:
    if a is study.captured:
        return "captured (measured op times)"
    if a is study.own_link:
        how = {"fit": "model + fitted CPU", "delta": "measured + delta"}.get(
            study.op_times, "model"
        )
        return f"{how} on own link ({a.name})"
    return a.name


def _reference(study: Study) -> str:
    """What the speedups are against, in words."""
    return "own-link replay" if study.reference is study.own_link else "captured"


def _networks(study: Study) -> Section:
    columns = [
        Column("network", "network"),
        Column("gbit", "link (Gbit/s)", "gbit"),
        Column("latency", "latency (us)", "us"),
        Column("step", "step, median (s)", "s"),
        Column("comm", "comm (s/step)", "s"),
        Column("share", "comm share (%)", "pct"),
        Column("exposed", "exposed (s/step)", "s"),
        Column("overlapped", "overlapped (s/step)", "s"),
        Column("speedup", f"speedup vs {_reference(study)}", "x"),
    ]
    rows = []
    for a in _all(study):
        f = a.figures
        rows.append(
            {
                "network": _label(study, a),
                "gbit": a.profile.effective_Gbps if a.profile else None,
                "latency": a.profile.latency_s if a.profile else None,
                "step": f.median_step_s,
                "comm": f.comm_s,
                "share": f.comm_share,
                "exposed": f.exposed_s,
                "overlapped": f.overlapped_s,
                "speedup": study.speedup(a),
            }
        )
    return Section(
        "networks",
        "step time per network",
        _table(rows, columns),
        columns,
        note="per step: the slowest rank's step time; comm, exposed and overlapped are means "
        "over ranks; medians over the steps kept; speedup: the "
        + _reference(study)
        + "'s median step over the row's"
        + (" (model against model)" if study.own_link is not None else ""),
    )


def _steps(study: Study) -> Section:
    answers = _all(study)
    columns = [Column("step", "step", "int")] + [
        Column(f"net{i}", f"{_label(study, a)} (s)", "s") for i, a in enumerate(answers)
    ]
    data: dict[str, list[object]] = {"step": list(study.captured.figures.steps)}
    for i, a in enumerate(answers):
        data[f"net{i}"] = list(a.figures.step_s)
    return Section("steps", "step time per step", pa.table(data), columns)


def _ops(study: Study) -> Section:
    columns = [
        Column("network", "network"),
        Column("op", "op"),
        Column("role", "role", "name"),
        Column("calls", "calls/step", "float"),
        Column("bytes", "bytes/step", "bytes"),
        Column("time", "time (s/step)", "s"),
        Column("service", "service (s/step)", "s"),
        Column("wait", "waiting (s/step)", "s"),
        Column("exposed", "exposed (s/step)", "s"),
    ]
    rows = [
        {
            "network": _label(study, a),
            "op": o.op,
            "role": o.role,
            "calls": o.calls,
            "bytes": o.bytes,
            "time": o.time_s,
            "service": o.service_s,
            "wait": o.wait_s,
            "exposed": o.exposed_s,
        }
        for a in _all(study)
        for o in a.figures.ops
    ]
    return Section(
        "ops",
        "per op and role, per step and rank",
        _table(rows, columns),
        columns,
        note="time = issue to end; waiting = issue to start (peers not there yet, or the "
        "group busy with the op before); service = start to end",
    )


def _roles(study: Study) -> Section:
    columns = [
        Column("network", "network"),
        Column("role", "role", "name"),
        Column("time", "time (s/step)", "s"),
        Column("service", "service (s/step)", "s"),
        Column("exposed", "exposed (s/step)", "s"),
    ]
    rows = []
    for a in _all(study):
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for o in a.figures.ops:
            acc = sums[o.role]
            acc[0] += o.time_s
            acc[1] += o.service_s
            acc[2] += o.exposed_s
        for role, (time, service, exposed) in sorted(sums.items(), key=lambda kv: -kv[1][0]):
            rows.append(
                {
                    "network": _label(study, a),
                    "role": role,
                    "time": time,
                    "service": service,
                    "exposed": exposed,
                }
            )
    return Section("roles", "per role, per step and rank", _table(rows, columns), columns)


def _ranks(study: Study) -> Section:
    columns = [
        Column("network", "network"),
        Column("rank", "slowest rank", "int"),
        Column("held", "its time held (s/step)", "s"),
        Column("median", "median rank held (s/step)", "s"),
    ]
    rows = [
        {
            "network": _label(study, a),
            "rank": a.figures.slowest_rank,
            "held": a.figures.slowest_held_s,
            "median": a.figures.median_held_s,
        }
        for a in _all(study)
    ]
    return Section(
        "ranks",
        "slowest rank (held least: the others wait for it)",
        _table(rows, columns),
        columns,
    )


TOP_PATH = 5
"""Ops shown per network on the critical path (after compute)."""


def _critical(study: Study) -> Section:
    columns = [
        Column("network", "network"),
        Column("op", "on the path"),
        Column("role", "role", "name"),
        Column("time", "time (s)", "s"),
        Column("share", "share (%)", "pct"),
    ]
    rows = [
        {
            "network": _label(study, a),
            "op": p.op,
            "role": p.role,
            "time": p.seconds,
            "share": p.share,
        }
        for a in _all(study)
        for p in a.figures.critical[: TOP_PATH + 1]
    ]
    step = study.captured.figures.steps[-1] if study.captured.figures.steps else 0
    return Section(
        "critical",
        f"critical path of step {step}: compute and the top ops",
        _table(rows, columns),
        columns,
        note="from the step's latest end back to its earliest start: compute on the ranks "
        "the path crosses, and the service of each op it waited for",
    )


CARRIED = {
    "fit": "each op's CPU term is fitted from the run against that link (--op-times fit), "
    "the networks below change only the link",
    "model": "the other networks carry that error; --op-times fit (the default) or a profile "
    "fitted here (`commlens bench --fit FILE.toml`, then --profile FILE.toml) narrows it",
    "delta": "the networks below keep each op's measured time and change only the model's "
    "difference (--op-times delta)",
}
"""What the own link's figure means for the networks, per op-times mode."""


def _calibration(study: Study) -> Section:
    columns = [
        Column("op", "op"),
        Column("role", "role"),
        Column("nodes", "nodes spanned"),
        Column("calls", "calls fitted"),
        Column("alpha", "alpha (us)", "us"),
        Column("beta", "beta (ns/KiB)"),
        Column("resid", "mean residual (us)", "us"),
    ]
    rows = [
        {
            "op": t.op,
            "role": t.role,
            "nodes": t.nodes,
            "calls": t.calls,
            "alpha": t.alpha_s,
            "beta": round(t.beta_s_per_byte * 1024 * 1e9, 3),
            "resid": t.mean_residual_s,
        }
        for t in study.calibration
    ]
    own = study.own_link.name if study.own_link else "?"
    return Section(
        "calibration",
        f"CPU terms fitted from the run against its own link ({own})",
        _table(rows, columns),
        columns,
        note="per op kind, measured service time minus the cost model's on the own link, "
        "fitted as alpha + beta x size (both >= 0); added to every network's model time",
    )


def _assumptions(study: Study) -> Section:
    columns = [Column("assumption", "assumption")]
    rows = [{"assumption": a} for a in study.assumptions]
    return Section("assumptions", "what the replay assumes", _table(rows, columns), columns)


RESULT_FORMAT = "commlens-whatif"
"""``format`` of a whatif JSON answer: what ``commlens compare`` recognises one by."""
RESULT_VERSION = 1


def _answer_data(study: Study, a: Answer) -> dict[str, object]:
    out: dict[str, object] = {"name": a.name, "speedup": study.speedup(a), **a.figures.to_dict()}
    out["profile"] = a.profile.to_dict() if a.profile else None
    return out


def _fastest(study: Study, best: Answer) -> str:
    """The highlight of the fastest network: its speedup against the reference, the
    measured step beside it."""
    line = (
        f"Fastest network: {best.name}, median step {best.figures.median_step_s:.6f} s, "
        f"{study.speedup(best):.2f}x the {_reference(study)}"
    )
    measured = study.captured.figures.median_step_s
    if study.reference is study.captured:
        return f"{line} {measured:.6f} s."
    own = study.reference.figures.median_step_s
    return f"{line}'s {own:.6f} s (the run measured {measured:.6f} s a step)."


LEAD_TITLE = "Step time per network"


def step_chart(study: Study) -> Figure:
    """The predicted median step of each network as a bar labelled with its speedup, the
    measured step as a line, and the measured steps' spread (quartiles, min to max) as
    bands around it; the own-link replay as a dashed line where known."""
    from matplotlib.figure import Figure

    from commlens.report.plots import LEGEND

    fig = Figure(figsize=(9.0, 4.5), layout="constrained")
    ax = fig.add_subplot()
    names = [a.name for a in study.answers]
    x = np.arange(len(names))
    bars = ax.bar(
        x, [a.figures.median_step_s for a in study.answers], 0.6, color="#1f77b4", label="replay"
    )
    ax.bar_label(
        bars,
        [f"{study.speedup(a):.2f}x" for a in study.answers],
        padding=3,
        fontsize="small",
        bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1},
    )
    measured = study.captured.figures
    if measured.step_s:
        lo, q1, q3, hi = np.percentile(measured.step_s, [0, 25, 75, 100])
        ax.axhspan(lo, hi, color="#ff7f0e", alpha=0.12, lw=0, label="measured min-max")
        ax.axhspan(q1, q3, color="#ff7f0e", alpha=0.3, lw=0, label="measured quartiles")
        ax.axhline(
            measured.median_step_s,
            color="#d62728",
            lw=1.5,
            label=f"measured {measured.median_step_s:.4g} s",
        )
    if study.own_link is not None:
        own = study.own_link.figures.median_step_s
        ax.axhline(own, color="black", ls="--", lw=1.2, label=f"own-link replay {own:.4g} s")
    ax.set_xticks(x, names, rotation=30 if len(names) > 4 else 0, fontsize="small")
    pad = max(0.0, (3 - len(names)) / 2)  # a lone bar no wider than one of three
    ax.set_xlim(-0.5 - pad, len(names) - 0.5 + pad)
    ax.set(
        title=f"{LEAD_TITLE}: median step, speedup vs {_reference(study)}",
        ylabel="step, median (s)",
    )
    ax.set_ylim(bottom=0)
    ax.margins(y=0.12)
    ax.legend(fontsize=LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def build_whatif_document(study: Study) -> Document:
    """The report of ``study``."""
    tr, place, check = study.trace, study.placement, study.check
    steps = study.captured.figures.steps
    facts = [
        ("run", tr.name),
        ("ranks", f"{tr.world_size} ({study.event_count:,} events)"),
        ("steps", f"{steps[0]}..{steps[-1]} ({len(steps)} kept)" if steps else "none"),
        (
            "placement",
            f"{place.nodes} node(s) x {place.ranks_per_node} rank(s), intra-node "
            f"{place.intra}, algorithm {place.algorithm} ({place.source})",
        ),
        ("self-check", check.line),
        (
            "op times",
            f"--op-times {study.op_times}; own link: "
            + (study.own_link.name if study.own_link else "unknown")
            + "; corrections: "
            + (", ".join(study.corrections) or "none"),
        ),
    ]
    if study.clock_shifts:
        moved = ", ".join(f"rank {r} {v / 1e6:+.3f} ms" for r, v in study.clock_shifts.items())
        facts.append(
            (
                "clocks",
                f"{moved}: corrected, the recorded offsets put ops' ends before their "
                "peers' issues",
            )
        )
    facts += provenance_facts(tr.manifest)
    for a in _all(study):
        if a.profile is not None and a.profile.source:
            facts.append((f"profile {a.name}", a.profile.source))
    best = max(study.answers, key=lambda a: study.speedup(a), default=None)
    highlights = [check.line[0].upper() + check.line[1:] + "."]
    error = study.model_error
    if study.own_link is not None and error is not None:
        highlights.append(
            f"On the run's own link ({study.own_link.name}) the replay gives a median step of "
            f"{study.own_link.figures.median_step_s:.6f} s against the measured "
            f"{study.captured.figures.median_step_s:.6f} s ({error:+.1%}): "
            f"{CARRIED[study.op_times]}."
        )
    else:
        highlights.append(
            "The run's own link is unknown, so the cost model's error on it is not shown and "
            "no CPU terms are fitted: give its profile with --profile."
        )
    if best is not None:
        highlights.append(_fastest(study, best))
    data: dict[str, object] = {
        "format": RESULT_FORMAT,
        "format_version": RESULT_VERSION,
        "run": tr.name,
        "world_size": tr.world_size,
        "events": study.event_count,
        "placement": vars(place),
        "self_check": {
            "max_step_error": check.max_step_error,
            "max_event_error_s": check.max_event_error_s,
        },
        "assumptions": study.assumptions,
        "clock_shifts_ns": {str(r): v for r, v in study.clock_shifts.items()},
        "captured": _answer_data(study, study.captured),
        "networks": [_answer_data(study, a) for a in study.answers],
        "own_link": _answer_data(study, study.own_link) if study.own_link else None,
        "model_error_on_own_link": error,
        "speedup_against": "own_link" if study.reference is study.own_link else "captured",
        "op_times": study.op_times,
        "calibration": [t.to_dict() for t in study.calibration],
        "corrections": study.corrections,
    }
    return Document(
        title=f"what-if replay: {run_brief(tr)} ({tr.name})",
        headline=[_fastest(study, best)] if best is not None else [],
        lead=(LEAD_TITLE, lambda: step_chart(study)),
        facts=facts,
        sections=[
            _networks(study),
            _steps(study),
            _roles(study),
            _ops(study),
            _ranks(study),
            _critical(study),
            *([_calibration(study)] if study.calibration else []),
            _assumptions(study),
        ],
        warnings=list(tr.warnings),
        data=data,
        highlights=highlights,
    )
