"""``commlens import SRC... --out RUN [--format F]``: other tools' traces as a commlens run.

Reads PyTorch profiler (Kineto) traces, with execution traces beside them for
sizes; execution traces alone; Flight Recorder dumps; DeepSpeed comms-logger
output; NCCL Inspector logs. The format is detected when not given. A source
is a file (``.gz`` too), a directory of per-rank files, a glob, or a
``.tar.gz`` of a trace folder. The run is written whole or not at all, with
its provenance in ``run.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from commlens.importers.registry import FORMATS


def register(subparsers: Any) -> None:
    about = "read other tools' traces (PyTorch profiler, FR, DeepSpeed, NCCL Inspector) into a run"
    p = subparsers.add_parser("import", help=about, description=__doc__)
    p.add_argument("sources", nargs="+", metavar="SRC", help="a file, directory, glob or .tar.gz")
    p.add_argument("--out", type=Path, required=True, metavar="RUN", help="run directory to write")
    p.add_argument("--format", choices=tuple(FORMATS), help="source format (default: detected)")
    p.add_argument("--world-size", type=int, help="the job's world size, when the files lack it")
    p.add_argument("--force", action="store_true", help="replace an old commlens run at --out")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="read per-rank files in this many processes (default: the CPUs)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.importers.registry import ImportOptions, detect_format, format_module
    from commlens.importers.sources import expand_sources
    from commlens.importers.write import check_out, write_run

    check_out(args.out, args.force)
    if args.format:
        format_module(args.format)  # "not available in this build" before any work
    with tempfile.TemporaryDirectory(prefix="commlens-import-") as scratch:
        sources = expand_sources(args.sources, Path(scratch))
        name = args.format or detect_format(list(sources))
        module = format_module(name)

        def warn(line: str) -> None:
            print(f"commlens import: warning: {line}", file=sys.stderr)

        options = ImportOptions(
            sources=sources, world_size=args.world_size, jobs=max(1, args.jobs), warn=warn
        )
        imported = module.read(list(sources), options)
        for line in imported.warnings:
            warn(line)
        events = write_run(imported, args.out, force=args.force, command=sys.argv)
    missing = imported.missing_ranks()
    said = f"; ranks {_ranks(missing)} missing" if missing else ""
    print(
        f"commlens import: {name}: {len(imported.ranks)} of {imported.world_size} ranks, "
        f"{events} events{said} -> {args.out}",
        file=sys.stderr,
    )
    return 0


def _ranks(ranks: list[int]) -> str:
    from commlens.trace.files import format_ranks

    return format_ranks(ranks)
