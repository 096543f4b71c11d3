"""Assemble the comparison of several runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pyarrow as pa

from commlens.analysis.compare import compare_ops, compare_summary, run_labels, work_note
from commlens.analysis.rankpass import rank_pass
from commlens.analysis.typical import DEFINITION
from commlens.report.build import run_brief
from commlens.report.document import Column, Document, Figure, Section
from commlens.report.document import Column as C
from commlens.report.provenance import provenance_facts
from commlens.trace.reader import RunView

SUMMARY_COLUMNS = (
    C("run", "run"),
    C("world_size", "world", "int"),
    C("steps", "steps", "int"),
    C("step_s", "step (s)", "s"),
    C("comm_s", "comm (s)", "s"),
    C("comm_share", "comm (%)", "pct"),
    C("exposed_s", "exposed (s)", "s"),
    C("exposed_share", "exposed (%)", "pct"),
    C("bytes_per_step", "bytes/step", "bytes"),
    C("tokens_per_step", "tokens/step", "int"),
    C("time_per_unit_s", "time/unit (us)", "us"),
    C("speedup", "speedup", "x"),
)
OP_COLUMNS = (
    C("op", "op"),
    C("role", "role"),
    C("run", "run"),
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
    C("time_s", "time (s)", "s"),
    C("busbw_GBps", "busbw (GB/s)", "gbps"),
    C("speedup", "speedup", "x"),
)


def _step_plot(summary: pa.Table) -> Figure:
    from commlens.report import plots

    labels = summary.column("run").to_pylist()
    series = {
        name: [float(v) for v in summary.column(key).to_pylist()]
        for name, key in (("step", "step_s"), ("comm", "comm_s"), ("exposed comm", "exposed_s"))
    }
    return plots.grouped_bars(labels, series, "Typical step per run", "time (s)")


def _op_plot(ops: pa.Table, labels: Sequence[str]) -> Figure:
    from commlens.report import plots

    times: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in ops.to_pylist():
        times[row["run"]][row["op"]] += float(row["time_s"] or 0.0)
    names = sorted({op for per in times.values() for op in per})
    series = {label: [times[label][op] for op in names] for label in labels}
    return plots.grouped_bars(names, series, "Time per op and run (summed over ranks)", "time (s)")


def _side_by_side(ops: pa.Table, labels: Sequence[str]) -> tuple[pa.Table, list[Column]]:
    """The long per-op table pivoted: one row per (op, role), columns per run."""
    keys = sorted({(r["op"], r["role"]) for r in ops.to_pylist()})
    cells = {(r["op"], r["role"], r["run"]): r for r in ops.to_pylist()}
    data: dict[str, list[object]] = {"op": [k[0] for k in keys], "role": [k[1] for k in keys]}
    columns = [C("op", "op"), C("role", "role")]
    for i, label in enumerate(labels):
        fields = [("bytes", "bytes", "bytes"), ("time_s", "time (s)", "s")]
        if i:
            fields.append(("speedup", "speedup", "x"))
        for field, title, fmt in fields:
            key = f"{field}@{label}"
            data[key] = [cells.get((op, role, label), {}).get(field) for op, role in keys]
            columns.append(C(key, f"{title} {label}", fmt))
    table = pa.table({k: pa.array(v) if v else pa.array([], pa.float64()) for k, v in data.items()})
    return table, columns


def compare_headline(summary: pa.Table) -> list[str]:
    """A sentence per run after the first: its typical step against the first run's,
    and where the communication share went."""
    rows = summary.to_pylist()
    if len(rows) < 2:
        return []
    base = rows[0]
    lines = []
    for row in rows[1:]:
        if not base["step_s"] or not row["step_s"]:
            lines.append(f"{row['run']}: no measured step to compare with {base['run']}")
            continue
        ratio = base["step_s"] / row["step_s"]
        faster = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        lines.append(
            f"{row['run']}: typical step {row['step_s']:.4g} s against {base['step_s']:.4g} s "
            f"for {base['run']} ({faster}); communication {base['comm_share']:.0%} → "
            f"{row['comm_share']:.0%} of the step, exposed {base['exposed_share']:.0%} → "
            f"{row['exposed_share']:.0%}"
        )
    return lines


def build_compare(runs: Sequence[RunView]) -> Document:
    passes = [rank_pass(run) for run in runs]  # each run's events read once
    summary = compare_summary(passes)
    ops = compare_ops(passes)
    labels = run_labels(passes)
    facts = [(label, str(run.path)) for label, run in zip(labels, runs, strict=True)]
    for label, run in zip(labels, runs, strict=True):
        facts += [(f"{label}: {key}", value) for key, value in provenance_facts(run.manifest)]
    warnings = [
        f"{label}: {w}" for label, run in zip(labels, runs, strict=True) for w in run.warnings
    ]
    wide, wide_columns = _side_by_side(ops, labels)
    sections = [
        Section(
            "summary",
            f"Runs (speedup relative to {labels[0]})",
            summary,
            SUMMARY_COLUMNS,
            note=f"{DEFINITION}; " + work_note(summary),
        ),
        Section(
            "ops",
            "Per op and role: volume and time, run by run (summed over ranks)",
            wide,
            wide_columns,
            plots=[("Time per op and run", lambda: _op_plot(ops, labels))],
        ),
    ]
    data = {
        "runs": summary.to_pylist(),
        "ops": ops.to_pylist(),
        "manifests": {label: run.manifest for label, run in zip(labels, runs, strict=True)},
        "warnings": warnings,
    }
    return Document(
        title="commlens compare: " + " vs ".join(labels),
        headline=[
            *compare_headline(summary),
            "; ".join(
                f"{label}: {run_brief(run)}" for label, run in zip(labels, runs, strict=True)
            ),
        ],
        lead=("Typical step per run", lambda: _step_plot(summary)),
        facts=facts,
        sections=sections,
        warnings=warnings,
        data=data,
        csv_table=ops,
    )
