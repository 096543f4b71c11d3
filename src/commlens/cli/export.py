"""``commlens export RUN --format chrome -o trace.json``: a timeline Perfetto opens."""

from __future__ import annotations

import argparse
import sys

from commlens.cli.report import add_steps_option
from commlens.safefile import open_text, resolve_target


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a run as a timeline (Chrome trace / Perfetto)",
        description="One track per rank and capture path, steps marked, each op with the "
        "PyTorch profiler's argument names. Open the file in ui.perfetto.dev.",
    )
    parser.add_argument("run", help="run directory")
    parser.add_argument(
        "--format", choices=("chrome",), default="chrome", help="export format (default: chrome)"
    )
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    add_steps_option(parser)
    parser.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from commlens.report.chrome import write_chrome_trace
    from commlens.trace.reader import open_run

    if args.output != "-":
        resolve_target(args.output)  # a directory or a missing folder fails before the work
    view = open_run(args.run, quiet=False, steps=args.steps)
    try:
        if args.output == "-":
            write_chrome_trace(view, sys.stdout)
            return 0
        with open_text(args.output) as out:
            n = write_chrome_trace(view, out)
    finally:
        view.close()
    print(f"commlens export: wrote {n} ops to {args.output}", file=sys.stderr)
    return 0
