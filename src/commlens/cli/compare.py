"""``commlens compare RUN RUN ...``: runs side by side, speedup vs the first; a whatif
result (``PRED.json``) beside a measured run: predicted against measured, with errors."""

from __future__ import annotations

import argparse

from commlens.cli.report import add_output_options
from commlens.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare runs: step time, comm share, per-op volume and time",
        description="Side by side: typical step time, communication share, per-op volume "
        "and time, and the speedup of each run relative to the first. Given a whatif result "
        "(`commlens whatif RUN --net NET --format json -o PRED.json`) beside a measured run, "
        "shows the predicted against the measured step time, communication share and per-op "
        "and per-role time, with the prediction's errors (--steps picks the measured run's "
        "steps; the prediction's are those whatif kept).",
    )
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run directories, or whatif results (PRED.json) beside a measured run (two or more)",
    )
    parser.add_argument(
        "--net",
        default=None,
        metavar="NAME",
        help="the network of a whatif result to compare (needed where it holds several)",
    )
    add_output_options(parser)
    parser.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from commlens.report.compare import build_compare
    from commlens.report.output import emit
    from commlens.report.versus import is_prediction
    from commlens.trace.reader import RunView, open_run

    if len(args.runs) < 2:
        raise UsageError("compare needs at least two runs")
    if any(is_prediction(path) for path in args.runs):
        return _compare_prediction(args)
    if args.net is not None:
        raise UsageError("--net picks the network of a whatif result (PRED.json); none given")
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


def _compare_prediction(args: argparse.Namespace) -> int:
    from commlens.report.output import emit
    from commlens.report.versus import build_versus, is_prediction, load_prediction, measure_run

    sides = [
        load_prediction(path, args.net) if is_prediction(path) else measure_run(path, args.steps)
        for path in args.runs
    ]
    emit(build_versus(sides), args.output, args.format, width=args.width)
    return 0
