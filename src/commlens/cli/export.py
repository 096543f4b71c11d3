"""``commlens export RUN --format chrome -o trace.json``: a timeline Perfetto opens.

A run of more than :data:`TRACK_LIMIT` ranks needs a selection (``--ranks``,
``--group``) or ``--all-ranks``: a trace of a thousand rank tracks is hundreds
of megabytes that Perfetto loads slowly, if at all, and no one can read it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from commlens.cli.report import CheckedOption, add_steps_option
from commlens.errors import UsageError
from commlens.safefile import open_text, resolve_target

if TYPE_CHECKING:
    from commlens.trace.reader import RunView

TRACK_LIMIT = 64
"""Most ranks exported without a selection (each is a process with its own tracks)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a run as a timeline (Chrome trace / Perfetto)",
        description="One track per rank and capture path, steps marked, each op with the "
        "PyTorch profiler's argument names. Open the file in ui.perfetto.dev. A run of more "
        f"than {TRACK_LIMIT} ranks needs --ranks, --group or --all-ranks.",
    )
    parser.add_argument("run", help="run directory")
    parser.add_argument(
        "--format", choices=("chrome",), default="chrome", help="export format (default: chrome)"
    )
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    add_steps_option(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--ranks",
        action=CheckedOption,
        parse=parse_rank_list,
        default=None,
        metavar="LIST",
        help="only these ranks: '0-7', '0,8,16-23'",
    )
    which.add_argument(
        "--group",
        metavar="NAME",
        help="only the ranks of this process group (its name, as `report` lists it)",
    )
    which.add_argument(
        "--all-ranks",
        action="store_true",
        help=f"every rank, even past {TRACK_LIMIT} (a trace too large for Perfetto to show well)",
    )
    parser.set_defaults(func=run_export)


def parse_rank_list(text: str) -> list[int]:
    """'0-7,12' -> [0, 1, ..., 7, 12]; a bad list is a :class:`UsageError`."""
    ranks: set[int] = set()
    for part in text.split(","):
        a, dash, b = part.strip().partition("-")
        try:
            first, last = int(a), int(b) if dash else int(a)
        except ValueError:
            raise UsageError(f"{text!r} is not a rank list: use e.g. 0-7 or 0,8,16-23") from None
        if first < 0 or last < first:
            raise UsageError(f"{text!r}: {part.strip()!r} holds no rank")
        if last - first >= 1 << 20:
            raise UsageError(f"{text!r}: {part.strip()!r} is too wide a range")
        ranks.update(range(first, last + 1))
    return sorted(ranks)


def selected_ranks(view: RunView, args: argparse.Namespace) -> list[int] | None:
    """The ranks to export (None: all of them); a run too wide to export whole without
    a selection, a rank not in the run or an unknown group is a :class:`UsageError`."""
    from commlens.trace.files import format_ranks  # numpy and pyarrow: not for --help

    known = view.ranks
    if args.ranks is not None:
        absent = sorted(set(args.ranks) - set(known))
        if absent:
            raise UsageError(
                f"--ranks {format_ranks(args.ranks)}: rank{'s' if len(absent) > 1 else ''} "
                f"{format_ranks(absent)} not in the run (its ranks with events: "
                f"{format_ranks(known)})"
            )
        return list(args.ranks)
    if args.group is not None:
        row = view.sql(
            "SELECT any_value(pg_ranks) AS m FROM events WHERE pg_name = ? ", [args.group]
        ).column("m")[0]
        members = row.as_py()
        if members is None:
            raise UsageError(
                f"--group {args.group!r}: no op of the run is in a group of that name "
                "(`commlens report` lists the groups)"
            )
        return sorted({int(r) for r in members} & set(known))
    if not args.all_ranks and len(known) > TRACK_LIMIT:
        group = view.row("SELECT pg_name, role FROM events WHERE role <> '' LIMIT 1")
        example = f" or --group {group[0]} (a {group[1]} group)" if group else ""
        raise UsageError(
            f"{len(known):,} ranks would be {len(known):,} process tracks, more than Perfetto "
            f"can show readably; choose some with --ranks 0-{min(known[0] + 7, known[-1])}"
            f"{example}, or pass --all-ranks"
        )
    return None


def run_export(args: argparse.Namespace) -> int:
    from commlens.report.chrome import write_chrome_trace
    from commlens.trace.files import format_ranks
    from commlens.trace.reader import open_run

    if args.output != "-":
        resolve_target(args.output)  # a directory or a missing folder fails before the work
    view = open_run(args.run, quiet=False, steps=args.steps)
    try:
        ranks = selected_ranks(view, args)  # before the output file exists
        if args.output == "-":
            write_chrome_trace(view, sys.stdout, ranks=ranks)
            return 0
        with open_text(args.output) as out:
            n = write_chrome_trace(view, out, ranks=ranks)
    finally:
        view.close()
    which = "" if ranks is None else f" of ranks {format_ranks(ranks)}"
    print(f"commlens export: wrote {n} ops{which} to {args.output}", file=sys.stderr)
    return 0
