"""What ``commlens run`` prints when training ends: the measured steps at a glance."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from commlens.analysis.typical import DEFINITION
from commlens.report.document import Column, Document, Section
from commlens.units import plural

if TYPE_CHECKING:
    from commlens.workloads.summary import RunSummary

COLUMNS = (
    Column("op", "op"),
    Column("role", "role"),
    Column("group_size", "group", "int"),
    Column("calls_per_step", "calls", "{:.1f}"),
    Column("avg_size_bytes", "avg size (bytes)", "rate"),
    Column("time_per_step_s", "time (s)", "{:.4f}"),
    Column("share", "share of step", "{:.1%}"),
)


def _flops(tflops: float) -> str:
    return f"{tflops:.2f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:.2f} GFLOP/s"


def run_summary_document(s: RunSummary, out: Path) -> Document:
    """The summary line, the top ops by time per rank per step, and where the run is."""
    figures = [
        f"step {s.step_s:.3f} s",
        f"communication {s.comm_s:.3f} s "
        f"({s.comm_share:.0%} of the step, {s.exposed_share:.0%} exposed)",
        f"{s.tokens_per_s:,.0f} tokens/s",
        f"{_flops(s.tflops_per_rank)} per rank",
    ]
    if s.first_loss is not None and s.last_loss is not None:
        figures.append(f"loss (rank {s.loss_rank}) {s.first_loss:.4f} → {s.last_loss:.4f}")
    line = f"{plural(s.steps, 'measured step')}: " + " · ".join(figures)
    definition = (
        f"{DEFINITION}, as `commlens compare` gives it; the lines above are rank "
        f"{s.loss_rank}'s own steps; its loss from the first step to the last"
    )
    rows = s.top_ops.to_pylist()
    for row in rows:
        row["role"] = row["role"] or "-"
    ops = pa.Table.from_pylist(rows, schema=s.top_ops.schema)
    data = {f.name: getattr(s, f.name) for f in fields(s) if f.name != "top_ops"}
    return Document(
        title="",
        warnings=s.warnings,
        intro=[line, definition],
        sections=[
            Section(
                "ops",
                "top ops by time (per rank per step)",
                ops,
                COLUMNS,
                note="time: the op's part of the step's communication (the union of the "
                "step's ops inside it, each moment split among the ops open then); the "
                "shares add up to the measured steps' communication share, all ranks "
                f"taken together ({s.pooled_share:.1%}; the line above gives the median "
                "step's)",
            )
        ],
        notes=[f"run saved in {out}; see `commlens report {out}`"],
        data={**data, "top_ops": s.top_ops.to_pylist(), "run": str(out)},
    )
