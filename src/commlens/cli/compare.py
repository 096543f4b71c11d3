"""``commlens compare RUN RUN ...``: runs side by side, speedup vs the first."""

from __future__ import annotations

import argparse

from commlens.cli.report import add_steps_option
from commlens.errors import UsageError
from commlens.report.formats import FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare runs: step time, comm share, per-op volume and time",
        description="Side by side: typical step time, communication share, per-op volume "
        "and time, and the speedup of each run relative to the first.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (two or more)")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="output format (default: from -o's suffix, else text)",
    )
    parser.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    parser.add_argument("--width", type=int, default=None, help="text width in columns")
    add_steps_option(parser)
    parser.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from commlens.analysis.source import RunView, open_run
    from commlens.report.compare import build_compare
    from commlens.report.output import emit

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
