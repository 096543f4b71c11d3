"""Entry point: builds the parser from the subcommand modules and runs one.

Each subcommand module defines ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed namespace and returning an
exit code. User errors (:class:`CommlensError`) become one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from commlens import __version__
from commlens.errors import CommlensError

# Subcommand modules under commlens.cli, in the order --help lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "trace",
    "run",
    "report",
    "compare",
    "export",
    "query",
    "predict",
    "validate",
    "net",
    "bench",
    "sweep",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="commlens",
        description="Show, measure and predict the communication of distributed training.",
    )
    parser.add_argument("--version", action="version", version=f"commlens {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"commlens.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CommlensError as exc:
        print(f"commlens {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"commlens {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
