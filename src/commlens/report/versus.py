"""A whatif prediction held against measured runs (``commlens compare PRED.json RUN``).

A *prediction* is one network's answer in the JSON that ``commlens whatif
--format json`` writes. A *measured* run's figures are found the way whatif
finds the captured ones (the replay with the run's own op times, checked
against its steps: :func:`commlens.whatif.study.replay_captured`), so both sides
follow one set of definitions (:mod:`commlens.whatif.results`): step time
of the slowest rank, communication, exposed and overlapped time and per-op
time per step and rank, medians over the steps kept. Errors are
(other − reference) / reference, the reference being the first measured run;
a communication share's error is the difference in percentage points.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.errors import RunFormatError, UsageError
from commlens.report.document import Column, Document, Section
from commlens.report.whatif import RESULT_FORMAT
from commlens.safefile import META_LIMIT, read_json
from commlens.whatif.results import Figures
from commlens.whatif.study import StepRange, replay_captured

ERROR = "{:+.1%}"
"""Display of a relative error."""
OPS_SCHEMA = pa.schema(
    [("input", pa.string()), ("kind", pa.string()), ("op", pa.string()), ("role", pa.string())]
    + [(f, pa.float64()) for f in ("calls", "bytes", "time_s", "service_s", "wait_s")]
    + [("exposed_s", pa.float64()), ("time_error", pa.float64())]
)
"""The long per-op table (CSV; JSON's ``ops``): a row per input, op and role."""
Values = dict[tuple[str, ...], dict[str, float]]
"""Per key of a table (a role; an op and role; a step), a side's figures by field."""


@dataclass
class Side:
    """One column of the comparison: a prediction or a measured run."""

    label: str
    kind: str
    """"predicted" or "measured"."""
    path: str
    figures: Figures
    about: str
    """Where the figures come from, in words."""
    warnings: list[str]


def is_prediction(path: str | Path) -> bool:
    """Whether ``path`` names a file (a whatif result) rather than a run directory."""
    return Path(path).is_file()


def load_prediction(path: str | Path, net: str | None) -> Side:
    """Network ``net``'s answer (the only one when None) in the whatif result ``path``."""
    where = str(path)
    how = "`commlens whatif RUN --net NET --format json -o FILE` writes one"
    try:
        data = read_json(path, limit=META_LIMIT)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not JSON"
        raise RunFormatError(f"{where}: not a whatif result ({reason}); {how}") from None
    if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
        raise RunFormatError(f"{where}: a JSON file but not a whatif result; {how}")
    networks = [n for n in data.get("networks") or [] if isinstance(n, dict)]
    names = [str(n.get("name")) for n in networks]
    if net is None and len(networks) != 1:
        listed = ", ".join(names) or "none"
        raise UsageError(
            f"{where} holds {len(networks)} networks ({listed}): choose one with --net NAME"
        )
    chosen = networks[0] if net is None else next((n for n in networks if n["name"] == net), None)
    if chosen is None:
        raise UsageError(f"{where} has no network {net!r}; it holds {', '.join(names)}")
    name = str(chosen["name"])
    try:
        figures = Figures.from_dict(chosen)
    except (KeyError, TypeError, ValueError):
        raise RunFormatError(f"{where}: whatif result damaged (network {name!r})") from None
    about = (
        f"predicted for {name} by whatif from run {data.get('run')} "
        f"({data.get('world_size')} ranks, --op-times {data.get('op_times')})"
    )
    return Side(f"{name} (predicted)", "predicted", where, figures, about, [])


def measure_run(path: str | Path, steps: StepRange | None) -> Side:
    """The figures of the run in ``path``, as whatif computes a captured run's."""
    trace, check, captured = replay_captured(path, steps)
    about = f"measured; its {check.line}"
    return Side(trace.name, "measured", str(path), captured.figures, about, trace.warnings)


def _error(value: float | None, ref: float | None) -> float | None:
    if value is None or ref is None or ref == 0:
        return None
    return value / ref - 1.0


def _unique(sides: Sequence[Side]) -> None:
    """Number the labels that repeat, as compare does with run names."""
    labels = [s.label for s in sides]
    for i, side in enumerate(sides):
        if labels.count(side.label) > 1:
            side.label = f"{i}:{side.label}"


def _summary(sides: Sequence[Side], ref: Side) -> tuple[pa.Table, list[Column]]:
    r = ref.figures
    rows = []
    for side in sides:
        f, other = side.figures, side is not ref
        rows.append(
            {
                "input": side.label,
                "kind": side.kind,
                "steps": len(f.steps),
                "step_s": f.median_step_s,
                "step_error": _error(f.median_step_s, r.median_step_s) if other else None,
                "comm_s": f.comm_s,
                "comm_error": _error(f.comm_s, r.comm_s) if other else None,
                "comm_share": f.comm_share,
                "share_error": (f.comm_share - r.comm_share) * 100 if other else None,
                "exposed_s": f.exposed_s,
                "exposed_error": _error(f.exposed_s, r.exposed_s) if other else None,
                "overlapped_s": f.overlapped_s,
            }
        )
    columns = [
        Column("input", "input"),
        Column("kind", "kind"),
        Column("steps", "steps", "int"),
        Column("step_s", "step, median (s)", "s"),
        Column("step_error", "step error", ERROR),
        Column("comm_s", "comm (s/step)", "s"),
        Column("comm_error", "comm error", ERROR),
        Column("comm_share", "comm share (%)", "pct"),
        Column("share_error", "share error (points)", "{:+.1f}"),
        Column("exposed_s", "exposed (s/step)", "s"),
        Column("exposed_error", "exposed error", ERROR),
        Column("overlapped_s", "overlapped (s/step)", "s"),
    ]
    return pa.Table.from_pylist(rows), columns


def _wide(
    keys: list[tuple[str, ...]],
    key_columns: list[Column],
    sides: Sequence[Side],
    ref: Side,
    values: list[Values],
    fields: list[tuple[str, str, str, bool]],
) -> tuple[pa.Table, list[Column]]:
    """One row per key; per field (key, title, format, with errors) a column per side,
    then the error of each side but the reference."""
    data: dict[str, list[Any]] = {c.key: [k[i] for k in keys] for i, c in enumerate(key_columns)}
    columns = list(key_columns)
    ref_at = sides.index(ref)
    for field, title, fmt, with_error in fields:
        for i, side in enumerate(sides):
            data[f"{field}@{i}"] = [values[i].get(k, {}).get(field) for k in keys]
            columns.append(Column(f"{field}@{i}", f"{title} {side.label}", fmt))
        if not with_error:
            continue
        for i, side in enumerate(sides):
            if i == ref_at:
                continue
            data[f"{field}_error@{i}"] = [
                _error(a, b)
                for a, b in zip(data[f"{field}@{i}"], data[f"{field}@{ref_at}"], strict=True)
            ]
            columns.append(Column(f"{field}_error@{i}", f"error {side.label}", ERROR))
    table = pa.table({k: pa.array(v, None if v else pa.float64()) for k, v in data.items()})
    return table, columns


def _role_totals(f: Figures) -> Values:
    sums: Values = defaultdict(lambda: defaultdict(float))
    for o in f.ops:
        for field in ("time_s", "service_s", "exposed_s"):
            sums[(o.role,)][field] += getattr(o, field)
    return sums


def _op_values(f: Figures) -> Values:
    return {(o.op, o.role): vars(o) for o in f.ops}


def _op_errors(side: Side, ref: Side) -> dict[tuple[str, ...], float | None]:
    """Per (op, role) of ``side``, its time's error against the reference's."""
    theirs = _op_values(ref.figures)
    return {
        k: _error(v["time_s"], theirs[k]["time_s"]) if k in theirs and side is not ref else None
        for k, v in _op_values(side.figures).items()
    }


def _steps(sides: Sequence[Side], ref: Side) -> tuple[pa.Table, list[Column]]:
    per = [dict(zip(s.figures.steps, s.figures.step_s, strict=True)) for s in sides]
    keys = sorted({step for p in per for step in p})
    values: list[Values] = [{(str(k),): {"step_s": v} for k, v in p.items()} for p in per]
    return _wide(
        [(str(k),) for k in keys],
        [Column("step", "step", align="right")],
        sides,
        ref,
        values,
        [("step_s", "step (s)", "s", True)],
    )


def _highlights(sides: Sequence[Side], ref: Side) -> list[str]:
    r = ref.figures
    lines = []
    for side in sides:
        if side is ref:
            continue
        f = side.figures
        step = _error(f.median_step_s, r.median_step_s)
        line = (
            f"{side.label}: median step {f.median_step_s:.6f} s against {ref.label}'s "
            f"{r.median_step_s:.6f} s ({'-' if step is None else ERROR.format(step)}); "
            f"comm share {f.comm_share:.1%} against {r.comm_share:.1%} "
            f"({(f.comm_share - r.comm_share) * 100:+.1f} points)"
        )
        errors = [(k, e) for k, e in _op_errors(side, ref).items() if e is not None]
        if errors:
            (op, role), worst = max(errors, key=lambda kv: abs(kv[1]))
            line += f"; largest op error {op} ({role or 'no role'}) {worst:+.1%}"
        lines.append(line + ".")
    return lines


def _mismatch(sides: Sequence[Side], ref: Side) -> list[str]:
    """Warnings where a side's ops are not the reference's (another job?)."""
    ours = set(_op_values(ref.figures))
    out = []
    for side in sides:
        theirs = set(_op_values(side.figures))
        if side is not ref and theirs != ours:
            odd = sorted(theirs ^ ours)
            listed = ", ".join(f"{op} ({role or 'no role'})" for op, role in odd[:4])
            out.append(
                f"{side.label} and {ref.label} differ in their ops ({listed}): "
                "are they the same job?"
            )
    return out


def build_versus(sides: list[Side]) -> Document:
    """The comparison of ``sides``: at least one prediction and one measured run."""
    measured = [s for s in sides if s.kind == "measured"]
    if not measured:
        raise UsageError("compare of a whatif result needs a measured run beside it")
    _unique(sides)
    ref = measured[0]
    summary, summary_columns = _summary(sides, ref)
    roles = _wide(
        sorted({k for s in sides for k in _role_totals(s.figures)}),
        [Column("role", "role", "name")],
        sides,
        ref,
        [_role_totals(s.figures) for s in sides],
        [("time_s", "time (s/step)", "s", True), ("exposed_s", "exposed (s/step)", "s", True)],
    )
    keys = sorted({k for s in sides for k in _op_values(s.figures)})
    ops = _wide(
        keys,
        [Column("op", "op"), Column("role", "role", "name")],
        sides,
        ref,
        [_op_values(s.figures) for s in sides],
        [
            ("calls", "calls/step", "float", False),
            ("time_s", "time (s/step)", "s", True),
            ("exposed_s", "exposed (s/step)", "s", True),
        ],
    )
    steps = _steps(sides, ref)
    long_ops = []
    for side in sides:
        errors = _op_errors(side, ref)
        long_ops += [
            {"input": side.label, "kind": side.kind, **vars(o), "time_error": errors[o.op, o.role]}
            for o in side.figures.ops
        ]
    ops_table = pa.Table.from_pylist(long_ops, schema=OPS_SCHEMA)
    warnings = [f"{s.label}: {w}" for s in sides for w in s.warnings] + _mismatch(sides, ref)
    per_rank = "per step and rank (means over the steps kept)"
    sections = [
        Section(
            "summary",
            f"predicted against measured (errors relative to {ref.label})",
            summary,
            summary_columns,
            note="step = the slowest rank's; comm, exposed and overlapped are means over ranks; "
            "medians over the steps kept; share error in percentage points",
        ),
        Section("steps", "step time per step", *steps),
        Section("roles", f"per role, {per_rank}", *roles),
        Section(
            "ops",
            f"per op and role, {per_rank}",
            *ops,
            note="time = issue to end; exposed = the time the rank was held by the op",
        ),
    ]
    data = {
        "reference": ref.label,
        "inputs": [
            {"label": s.label, "kind": s.kind, "path": s.path, "about": s.about} for s in sides
        ],
        "summary": summary.to_pylist(),
        "steps": [
            {"input": s.label, "step": step, "step_s": t}
            for s in sides
            for step, t in zip(s.figures.steps, s.figures.step_s, strict=True)
        ],
        "ops": long_ops,
        "warnings": warnings,
    }
    return Document(
        title="commlens compare: " + " vs ".join(s.label for s in sides),
        facts=[(s.label, f"{s.path}: {s.about}") for s in sides],
        sections=sections,
        warnings=warnings,
        data=data,
        csv_table=ops_table,
        highlights=_highlights(sides, ref),
    )
