"""``commlens validate RUN``: hold a captured run against the analytical model."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from commlens.cli.net import add_page_options
from commlens.numbers import MAX_TOLERANCE, number_type


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="compare a run's captured calls and bytes with the model; exit 1 on a gap",
        description="Reads the run's model and layout from its manifest, predicts every "
        "rank's calls per step, and holds each (op, role) per rank and step: call counts "
        "exact, bytes (sum of nccl-tests S) within the tolerance. Every step is held, step 0 "
        "against its own prediction (DDP's start-up broadcast, one bucket before the rebuild). "
        "A traced run (no model in its manifest) is held against what its own communication "
        "implies, naming the expectations that could not be formed.",
    )
    p.add_argument("run", help="run directory (`commlens run`, `commlens trace` or a capture)")
    p.add_argument(
        "--tolerance",
        type=number_type(low=0.0, high=MAX_TOLERANCE),
        default=0.01,
        help="relative byte tolerance, 0 to 1 (default 0.01 = 1%%)",
    )
    p.add_argument(
        "--skip-step0",
        action="store_true",
        help="do not hold step 0 (DDP's start-up broadcast and one-bucket backward are modelled)",
    )
    add_page_options(p, output=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.analysis.expectations import validate_traced
    from commlens.predict.validate import is_traced, validate_run
    from commlens.report.output import emit
    from commlens.report.provenance import provenance_facts
    from commlens.report.validate import validation_document
    from commlens.trace.reader import RunView, load_run, open_run

    # a traced run (no model to predict from) is held against its own traffic, a rank
    # at a time; one with a model is loaded whole
    run: Any = open_run(args.run)
    result: Any
    try:
        if is_traced(run.manifest):
            shown = len(run.warnings)
            for line in run.warnings:
                print(f"commlens: warning: {line}", file=sys.stderr)
            result = validate_traced(run)
            for line in run.warnings[shown:]:  # ranks found damaged while read
                print(f"commlens: warning: {line}", file=sys.stderr)
        else:
            run.close()
            run = load_run(args.run)
            result = validate_run(run, args.tolerance, args.skip_step0)
    finally:
        if isinstance(run, RunView):
            run.close()
    doc = validation_document(result)
    doc.facts += provenance_facts(run.manifest)  # an imported run says where it came from
    emit(doc, args.output, args.format, width=args.width)
    return 0 if result.ok else 1
