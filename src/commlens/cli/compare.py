"""``commlens compare RUN RUN ...``: runs side by side, speedup vs the first."""

from __future__ import annotations

import argparse

from commlens.cli.report import add_output_options
from commlens.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare runs: step time, comm share, per-op volume and time",
        description="Side by side: typical step time, communication share, per-op volume "
        "and time, and the speedup of each run relative to the first.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (two or more)")
    add_output_options(parser)
    parser.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from commlens.report.compare import build_compare
    from commlens.report.output import emit
    from commlens.trace.reader import RunView, open_run

    if len(args.runs) < 2:
        raise UsageError("compare needs at least two runs")
    views: list[RunView] = []
    try:
        for path in args.runs:
            views.append(open_run(path, quiet=False, steps=args.steps))
        doc = build_compare(views)
    finally:
        for view in views:
            view.close()
    emit(doc, args.output, args.format, width=args.width)
    return 0
