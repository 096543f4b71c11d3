"""commlens merge OUT DIR [DIR ...]: join per-node run directories into one run.

For a job whose nodes could not share a file system: each node traced into
its own directory (commlens trace --out DIR on each). Merging checks that
they are of one job (same world size and job, no rank twice) and writes OUT,
whole or not at all. The inputs are left as they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    about = "join the per-node run directories of one job into one run"
    p = subparsers.add_parser("merge", help=about, description=__doc__)
    p.add_argument("out", type=Path, metavar="OUT", help="run directory to write (new or empty)")
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="a node's run directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.trace.merge import merge_runs

    result = merge_runs(args.out, args.dirs)
    for warning in result.warnings:
        print(f"commlens merge: warning: {warning}", file=sys.stderr)
    print(
        f"commlens merge: {len(result.ranks)} of {result.world_size} ranks from "
        f"{len(args.dirs)} runs ({result.nodes} nodes) -> {result.out}",
        file=sys.stderr,
    )
    return 0
