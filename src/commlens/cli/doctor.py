"""``commlens doctor RUN``: why a job hung or slowed (hang, desync, straggler, dead rank)."""

from __future__ import annotations

import argparse
from typing import Any

from commlens.cli.net import add_page_options


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="name what stopped or slowed a job: hang, desync, straggler or dead rank; "
        "exit 0 healthy, 1 a problem found, 2 could not read",
        description="Reads a commlens run (complete, killed or still hanging) or a directory "
        "of Flight Recorder dumps, and says first which ranks are at the root of a hang, "
        "where the members of a group disagree, who arrives last, or that the run is healthy; "
        "then the evidence: per group the last op completed and those in flight, and the "
        "Python stacks the hang watchdog dumped.",
    )
    p.add_argument("run", help="run directory, or a directory of Flight Recorder dumps")
    add_page_options(p, output=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.doctor import diagnose, load_evidence
    from commlens.report.doctor import doctor_document
    from commlens.report.output import emit

    evidence = load_evidence(args.run)
    diagnosis = diagnose(evidence)
    emit(doctor_document(evidence, diagnosis), args.output, args.format, width=args.width)
    return 0 if diagnosis.kind == "healthy" else 1


def add_hang_options(parser: argparse.ArgumentParser) -> None:
    """--hang-timeout and --kill-on-hang, for the commands that run a job."""
    parser.add_argument(
        "--hang-timeout",
        type=float,
        metavar="SECONDS",
        help="watch the ranks: when no op finishes for SECONDS while one is in flight, dump "
        "every rank's Python stacks and ops in flight into the run and print the diagnosis",
    )
    parser.add_argument(
        "--kill-on-hang", action="store_true", help="with --hang-timeout: then kill the ranks"
    )


def check_hang_options(args: argparse.Namespace) -> None:
    from commlens.errors import UsageError

    if args.kill_on_hang and args.hang_timeout is None:
        raise UsageError("--kill-on-hang needs --hang-timeout")
    if args.hang_timeout is not None and not args.hang_timeout > 0:
        raise UsageError(
            f"--hang-timeout must be a positive number of seconds, got {args.hang_timeout}"
        )


def watching(out: Any, args: argparse.Namespace, command: str) -> Any:
    """A hang watchdog over the run ``out`` as ``args`` ask (a no-op context without one)."""
    import contextlib
    import sys
    from pathlib import Path

    if args.hang_timeout is None:
        return contextlib.nullcontext()
    from commlens.launch.watchdog import HangWatchdog

    def on_hang(run_dir: Path) -> None:
        from commlens.doctor import diagnose, load_evidence
        from commlens.errors import CommlensError
        from commlens.report.doctor import doctor_document
        from commlens.report.formats import get_renderer

        then = "killing the ranks" if args.kill_on_hang else "the job keeps running"
        print(
            f"{command}: no op finished for {args.hang_timeout:g} s while ops are in flight: "
            f"stacks dumped into {run_dir}; {then}",
            file=sys.stderr,
        )
        try:
            evidence = load_evidence(run_dir)
            text = get_renderer("text").render(doctor_document(evidence, diagnose(evidence)))
        except CommlensError as exc:
            text = f"{command}: the diagnosis could not be made: {exc}\n"
        sys.stderr.write(str(text))
        sys.stderr.flush()

    return HangWatchdog(Path(out), args.hang_timeout, on_hang, kill=args.kill_on_hang)
