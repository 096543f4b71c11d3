"""What ``commlens validate`` prints: a run's captured calls and bytes against the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

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


def validation_document(result: Validation) -> Document:
    """One row per (op, role), the model's notes and the verdict; ``data`` is
    :meth:`Validation.to_dict`."""
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
    return Document(
        title=f"{job.model.name} {job.scheme} dp={d.dp} tp={d.tp} pp={d.pp}  "
        f"s={job.seq_len} b={job.micro_batch} k={job.microbatches} {job.dtype}",
        facts=[
            ("steps held", f"{result.steps[0]}..{result.steps[-1]}" if result.steps else "none"),
            ("ranks", ",".join(map(str, result.ranks))),
            ("tolerance", f"{result.tolerance:.2%}"),
        ],
        sections=[Section("ops", "measured vs predicted, per op and role", table, COLUMNS)],
        notes=[*(f"note: {note}" for note in result.notes), verdict],
        data=result.to_dict(),
    )
