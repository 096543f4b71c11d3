"""``commlens validate RUN``: hold a captured run against the analytical model."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from commlens.cli.predict import console_for_tables
from commlens.predict.validate import validate_run

if TYPE_CHECKING:
    from rich.console import Console

    from commlens.predict.validate import Validation


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="compare a run's captured calls and bytes with the model; exit 1 on a gap",
        description="Reads the run's model and layout from its manifest, predicts every "
        "rank's calls per step, and holds each (op, role) per rank and step: call counts "
        "exact, bytes (sum of nccl-tests S) within the tolerance. Every step is held, step 0 "
        "against its own prediction (DDP's start-up broadcast, one bucket before the rebuild).",
    )
    p.add_argument("run", help="run directory (written by `commlens run`)")
    p.add_argument(
        "--tolerance", type=float, default=0.01, help="relative byte tolerance (default 0.01 = 1%%)"
    )
    p.add_argument(
        "--skip-step0",
        action="store_true",
        help="do not hold step 0 (DDP's start-up broadcast and one-bucket backward are modelled)",
    )
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.set_defaults(func=run)


def render_text(result: Validation, console: Console) -> None:
    from rich.table import Table

    job = result.job
    d = job.dims
    console.print(
        f"[bold]{job.model.name}[/bold] {job.scheme} dp={d.dp} tp={d.tp} pp={d.pp}  "
        f"s={job.seq_len} b={job.micro_batch} k={job.microbatches} {job.dtype}  "
        f"steps {result.steps[0]}..{result.steps[-1]} held on ranks "
        f"{','.join(map(str, result.ranks))}, tolerance {result.tolerance:.2%}"
    )
    table = Table(title="measured vs predicted, per op and role", title_justify="left")
    cols = (
        "op",
        "role",
        "rank-steps",
        "calls (pred)",
        "calls (meas)",
        "bytes (pred)",
        "bytes (meas)",
        "max err",
        "verdict",
        "explanation",
    )
    for col in cols:
        table.add_column(
            col,
            justify="left" if col in ("op", "role", "verdict", "explanation") else "right",
            overflow="fold",
        )
    for s in result.summary():
        table.add_row(
            s.op,
            s.role or "-",
            str(s.checks),
            f"{s.predicted_calls:,}",
            f"{s.measured_calls:,}",
            f"{s.predicted_bytes:,}",
            f"{s.measured_bytes:,}",
            "inf" if s.max_rel_error == float("inf") else f"{s.max_rel_error:.3%}",
            "[green]ok[/green]" if s.ok else "[red]MISMATCH[/red]",
            s.explanation,
        )
    console.print(table)
    for note in result.notes:
        console.print(f"note: {note}")
    if result.ok:
        console.print("[green]validate: the run matches the model[/green]")
    else:
        bad = sorted({f"{c.op}/{c.role or '-'}" for c in result.failures})
        console.print(f"[red]validate: mismatch in {', '.join(bad)}[/red]")


def run(args: argparse.Namespace) -> int:
    from commlens.trace.reader import load_run

    result = validate_run(load_run(args.run), args.tolerance, args.skip_step0)
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render_text(result, console_for_tables())
    return 0 if result.ok else 1
