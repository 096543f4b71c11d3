"""What ``commlens validate`` prints: a run's captured calls and bytes against the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from commlens.analysis.expectations import TracedValidation
from commlens.report.document import Column, Document, Section

if TYPE_CHECKING:
    from commlens.predict.validate import Validation

COLUMNS = (
    Column("op", "op"),
    Column("role", "role"),
    Column("checks", "rank-steps", "int"),
    Column("predicted_calls", "calls (pred)", "int"),
    Column("measured_calls", "calls (meas)", "int"),
    Column("predicted_bytes", "bytes (pred)", "int"),
    Column("measured_bytes", "bytes (meas)", "int"),
    Column("max_err", "max err", align="right"),
    Column("verdict", "verdict"),
    Column("explanation", "explanation"),
)


TRACED_COLUMNS = (
    Column("name", "expectation"),
    Column("pg_name", "group"),
    Column("role", "role"),
    Column("verdict", "verdict"),
    Column("detail", "detail"),
)


def traced_document(result: TracedValidation) -> Document:
    """One row per expectation of a traced run, formed or not, and the verdict."""
    rows = result.expectations
    table = pa.table(
        {
            "name": pa.array([e.name for e in rows], pa.string()),
            "pg_name": pa.array([e.pg_name for e in rows], pa.string()),
            "role": pa.array([e.role or "-" for e in rows], pa.string()),
            "verdict": pa.array(
                [("ok" if e.ok else "MISMATCH") if e.formed else "not formed" for e in rows],
                pa.string(),
            ),
            "detail": pa.array([e.detail for e in rows], pa.string()),
        }
    )
    formed = [e for e in rows if e.formed]
    if not formed:
        verdict = "validate: no expectation could be formed from this run"
    elif result.ok:
        verdict = "validate: the run matches what its own communication implies"
    else:
        bad = sorted({f"{e.name} on group {e.pg_name}" for e in formed if not e.ok})
        verdict = f"validate: mismatch: {'; '.join(bad)}"
    unformed = len(rows) - len(formed)
    return _held(
        result,
        "validate: a traced run, held against its own communication (no model in the manifest)",
        ("expectations", f"{len(formed)} formed, {unformed} could not be formed"),
        Section("expectations", "expectations per group", table, TRACED_COLUMNS),
        verdict,
    )


def _held(
    result: Validation | TracedValidation,
    title: str,
    fact: tuple[str, str],
    section: Section,
    verdict: str,
) -> Document:
    """The document of a verdict: steps and ranks held, one more fact, its table."""
    return Document(
        title=title,
        facts=[
            ("steps held", f"{result.steps[0]}..{result.steps[-1]}" if result.steps else "none"),
            ("ranks", ",".join(map(str, result.ranks))),
            fact,
        ],
        sections=[section],
        notes=[*(f"note: {note}" for note in result.notes), verdict],
        headline=[verdict],
        data=result.to_dict(),
    )


def validation_document(result: Validation | TracedValidation) -> Document:
    """One row per (op, role), the model's notes and the verdict; ``data`` is
    :meth:`Validation.to_dict` (a traced run: :func:`traced_document`)."""
    if isinstance(result, TracedValidation):
        return traced_document(result)
    job = result.job
    d = job.dims
    summary = result.summary()
    table = pa.table(
        {
            "op": [s.op for s in summary],
            "role": [s.role or "-" for s in summary],
            "checks": pa.array([s.checks for s in summary], pa.int64()),
            "predicted_calls": pa.array([s.predicted_calls for s in summary], pa.int64()),
            "measured_calls": pa.array([s.measured_calls for s in summary], pa.int64()),
            "predicted_bytes": pa.array([s.predicted_bytes for s in summary], pa.int64()),
            "measured_bytes": pa.array([s.measured_bytes for s in summary], pa.int64()),
            "max_err": [
                "inf" if s.max_rel_error == float("inf") else f"{s.max_rel_error:.3%}"
                for s in summary
            ],
            "verdict": ["ok" if s.ok else "MISMATCH" for s in summary],
            "explanation": [s.explanation for s in summary],
        }
    )
    if result.ok:
        verdict = "validate: the run matches the model"
    else:
        bad = sorted({f"{c.op}/{c.role or '-'}" for c in result.failures})
        verdict = f"validate: mismatch in {', '.join(bad)}"
    return _held(
        result,
        f"validate: {job.model.name} {job.scheme} dp={d.dp} tp={d.tp} pp={d.pp}  "
        f"s={job.seq_len} b={job.micro_batch} k={job.microbatches} {job.dtype}",
        ("tolerance", f"{result.tolerance:.2%}"),
        Section("ops", "measured vs predicted, per op and role", table, COLUMNS),
        verdict,
    )
