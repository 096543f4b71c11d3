"""Entry point: builds the parser from the subcommand modules and runs one.

Each subcommand module defines ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed namespace and returning an
exit code. User errors (:class:`CommlensError`) become one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from commlens import __version__
from commlens.errors import CommlensError

# Subcommand modules under commlens.cli, in the order --help lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "trace",
    "merge",
    "imports",
    "run",
    "report",
    "compare",
    "export",
    "query",
    "predict",
    "whatif",
    "validate",
    "doctor",
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


class _Sigint:
    """Whether Ctrl-C came: a library that catches the KeyboardInterrupt (DuckDB turns
    it into "Query interrupted") must still end the command as an interruption."""

    seen = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.seen = True
        raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    _Sigint.seen = False
    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if ours:
        signal.signal(signal.SIGINT, _Sigint.handler)
    try:
        return _main(argv)
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _check_output(args: argparse.Namespace) -> None:
    """Every command's ``-o`` lies outside what it reads (its ``run`` or ``runs``)."""
    output = getattr(args, "output", None)
    if output and output != "-":
        from commlens.safefile import refuse_inside

        inputs = [getattr(args, "run", None), *(getattr(args, "runs", None) or [])]
        refuse_inside(output, [i for i in inputs if i])


def _main(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C before a command started
        # A KeyboardInterrupt raised while a module imports can come out as another
        # error (a dataclass field's __set_name__ wraps it in a RuntimeError).
        if not (isinstance(exc, KeyboardInterrupt) or _Sigint.seen):
            raise
        print("commlens: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        _check_output(args)
        return int(args.func(args) or 0)
    except (KeyboardInterrupt, Exception) as exc:
        if isinstance(exc, KeyboardInterrupt) or _Sigint.seen:
            print(f"commlens {args.command}: interrupted", file=sys.stderr)
            return 130
        if isinstance(exc, CommlensError):
            print(f"commlens {args.command}: error: {exc}", file=sys.stderr)
            return exc.exit_code
        if isinstance(exc, BrokenPipeError):
            return 0
        raise
