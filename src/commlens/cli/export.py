"""``commlens export RUN --format chrome -o trace.json``: a timeline Perfetto opens."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from commlens.cli.report import add_steps_option
from commlens.errors import UsageError


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
    from commlens.analysis.source import open_run
    from commlens.report.chrome import write_chrome_trace

    view = open_run(args.run, quiet=False, steps=args.steps)
    try:
        if args.output == "-":
            write_chrome_trace(view, sys.stdout)
            return 0
        path = Path(args.output)
        if not path.parent.is_dir():
            raise UsageError(f"{args.output}: directory {path.parent} does not exist")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w") as out:
                n = write_chrome_trace(view, out)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UsageError(f"{args.output}: cannot write ({exc.strerror})") from None
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        view.close()
    print(f"commlens export: wrote {n} ops to {path}", file=sys.stderr)
    return 0
