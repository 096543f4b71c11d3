"""``commlens report RUN``: where the communication time of a run goes."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from commlens.errors import UsageError
from commlens.report.formats import FORMATS
from commlens.units import plural

MIN_WIDTH, MAX_WIDTH = 40, 1000
"""Text widths a table can be laid out in, in columns."""
LARGE_RUN_EVENTS = 1_000_000
"""A run of at least this many events gets a note on stderr as the report starts
and ends (how many, how long): reading it takes a while."""
CSV_TABLES = (
    "sizes",
    "ops",
    "steps",
    "rank_steps",
    "ranks",
    "phases",
    "modules",
    "histogram",
    "skew",
    "stragglers",
    "utilization",
)
"""Tables ``report --format csv --table`` can write (keys of the report's JSON data)."""
MAX_STEP = 10**9
"""Largest step number a --steps range may name."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="tables and plots of a run's communication",
        description="Per op and process group: calls, bytes, time, service time on the "
        "group's queue, latency, algbw, busbw; per step: comm share and exposed time; "
        "cross-rank skew (queued, waiting for the last peer, transfer); utilization. The "
        "headline leaves out set-up, the first step (warm-up) and anything after the last "
        "step, and says which steps it covers; --steps chooses the steps of the whole report.",
    )
    parser.add_argument(
        "run", help="run directory (run.json + rank-*.parquet), or a `commlens sweep` directory"
    )
    add_output_options(parser)
    parser.add_argument(
        "--table",
        choices=CSV_TABLES,
        default="sizes",
        help="with --format csv, the one table written (one CSV holds one table, as "
        "pandas.read_csv reads it): sizes (default: one row per op x group x log2 size), "
        "ops, steps, rank_steps, ranks, phases, modules, histogram, skew, stragglers, "
        "utilization; run once per table for several",
    )
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
    add_width_option(parser)
    add_steps_option(parser)


class CheckedOption(argparse.Action):
    """Stores ``parse(value)``; a bad value ends the command with one line and exit code 2.

    The line reads like every other user error: ``commlens CMD: error: --flag ...``.
    """

    def __init__(self, *args: Any, parse: Callable[[str], object], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parse = parse

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        try:
            value = self.parse(str(values))
        except UsageError as exc:
            parser.exit(2, f"{parser.prog}: error: {option_string or self.dest} {exc}\n")
        setattr(namespace, self.dest, value)


def add_width_option(parser: argparse.ArgumentParser) -> None:
    """--width COLUMNS, checked to lie in MIN_WIDTH..MAX_WIDTH."""
    parser.add_argument(
        "--width",
        action=CheckedOption,
        parse=parse_width,
        default=None,
        metavar="COLUMNS",
        help=f"text width in columns ({MIN_WIDTH}..{MAX_WIDTH}; default: the terminal's)",
    )


def parse_width(text: str) -> int:
    """Columns from ``text``; a :class:`UsageError` outside MIN_WIDTH..MAX_WIDTH."""
    try:
        width = int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a number of columns") from None
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise UsageError(f"{width} is outside {MIN_WIDTH}..{MAX_WIDTH} columns")
    return width


def add_steps_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps",
        action=CheckedOption,
        parse=parse_steps,
        default=None,
        metavar="A:B",
        help="only steps A..B-1, like a Python slice: '1:' leaves out step 0 (warm-up), "
        "':10' the first ten, '3' step 3 alone; steps are numbered from 0 (step numbers, "
        "not a count as in `run --steps`)",
    )


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """'A:B', 'A:', ':B' or 'A' -> (first, stop) with 0 <= first <= step < stop.

    A bad range (not integers, a negative step, B <= A, past MAX_STEP) is a
    :class:`UsageError`.
    """
    try:
        if ":" not in text:
            first = int(text)
            steps: tuple[int | None, int | None] = (first, first + 1)
        else:
            a, b = text.split(":", 1)
            steps = (int(a) if a.strip() else None, int(b) if b.strip() else None)
    except ValueError:
        raise UsageError(f"{text!r} is not a step range: use A:B, A:, :B or A (integers)") from None
    for value in steps:
        if value is not None and value < 0:
            raise UsageError(f"{text!r}: steps are numbered from 0; negative steps do not exist")
        if value is not None and value > MAX_STEP + 1:
            raise UsageError(f"{text!r}: steps go up to {MAX_STEP:,}")
    if steps[0] is not None and steps[1] is not None and steps[1] <= steps[0]:
        raise UsageError(f"{text!r} holds no step: B must be greater than A")
    if steps[1] == 0:
        raise UsageError(f"{text!r} holds no step: B must be greater than 0")
    return steps


def run_report(args: argparse.Namespace) -> int:
    from commlens.report.build import build_report
    from commlens.report.output import emit
    from commlens.sweep.catalog import is_sweep_dir
    from commlens.trace.reader import open_run

    if is_sweep_dir(args.run):  # a `commlens sweep` directory: tables and plots across the grid
        from commlens.report.sweep import render_sweep

        render_sweep(args.run, args.format, args.output, width=args.width)
        return 0
    start = time.monotonic()
    view = open_run(args.run, quiet=False, steps=args.steps)
    try:
        events = int((view.row("SELECT coalesce(sum(events), 0) FROM ranks") or (0,))[0])
        large = events >= LARGE_RUN_EVENTS  # minutes of work: say so, on stderr
        if large:
            print(
                f"commlens report: {events:,} events of {plural(view.world_size, 'rank')}; "
                "reading them...",
                file=sys.stderr,
                flush=True,
            )
        doc = build_report(view, csv_table=args.table)
    finally:
        view.close()
    emit(doc, args.output, args.format, width=args.width)
    if large:
        print(
            f"commlens report: {events:,} events read and analysed in "
            f"{time.monotonic() - start:.1f} s",
            file=sys.stderr,
        )
    return 0
