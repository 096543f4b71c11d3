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
    add_page_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.doctor import diagnose, load_evidence
    from commlens.report.doctor import doctor_document
    from commlens.report.output import emit

    evidence = load_evidence(args.run)
    diagnosis = diagnose(evidence)
    emit(doctor_document(evidence, diagnosis), None, args.format, width=args.width)
    return 0 if diagnosis.kind == "healthy" else 1
