"""``commlens report RUN``: where the communication time of a run goes."""

from __future__ import annotations

import argparse

from commlens.report.formats import FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="tables and plots of a run's communication",
        description="Per op and process group: calls, bytes, time, latency, algbw, busbw; "
        "per step: comm share and exposed time; cross-rank skew; utilization.",
    )
    parser.add_argument(
        "run", help="run directory (run.json + rank-*.parquet), or a `commlens sweep` directory"
    )
    add_output_options(parser)
    parser.set_defaults(func=run_report)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--format, -o, --width and --steps, shared by report and compare."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="output format (default: from -o's suffix, else text)",
    )
    parser.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    parser.add_argument("--width", type=int, default=None, help="text width in columns")
    add_steps_option(parser)


def add_steps_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps",
        type=parse_steps,
        default=None,
        metavar="A:B",
        help="only steps A..B-1, like a Python slice: '1:' leaves out step 0 (warm-up), "
        "':10' the first ten, '3' step 3 alone",
    )


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """'A:B', 'A:', ':B' or 'A' -> (first, stop) with first <= step < stop."""
    try:
        if ":" not in text:
            first = int(text)
            return first, first + 1
        a, b = text.split(":", 1)
        steps = (int(a) if a.strip() else None, int(b) if b.strip() else None)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a step range: use A:B, A:, :B or A (integers)"
        ) from None
    if steps[0] is not None and steps[1] is not None and steps[1] <= steps[0]:
        raise argparse.ArgumentTypeError(f"{text!r} holds no step: B must be greater than A")
    return steps


def run_report(args: argparse.Namespace) -> int:
    from commlens.analysis.source import open_run
    from commlens.report.build import build_report
    from commlens.report.output import emit
    from commlens.sweep.catalog import is_sweep_dir

    if is_sweep_dir(args.run):  # a `commlens sweep` directory: tables and plots across the grid
        from commlens.sweep.report import render_sweep

        render_sweep(args.run, args.format, args.output, width=args.width)
        return 0
    view = open_run(args.run, quiet=False, steps=args.steps)
    try:
        doc = build_report(view)
    finally:
        view.close()
    emit(doc, args.output, args.format, width=args.width)
    return 0
