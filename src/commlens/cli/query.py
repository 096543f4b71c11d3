"""``commlens query RUN "SQL"``: read-only DuckDB over the views events, steps, ranks.

The session may read the run's views and nothing else (see
:mod:`commlens.analysis.query`); results stream to stdout batch by batch, and
Ctrl-C stops a running statement.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, TYPE_CHECKING

from commlens.cli.report import add_width_option
from commlens.errors import UsageError

if TYPE_CHECKING:
    from commlens.analysis.query import QueryResult, QuerySession

DEFAULT_MAX_ROWS = 100


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "query",
        help="read-only SQL (DuckDB) over a run's events, steps and ranks",
        description="Views: events (one row per op, times on rank 0's clock), "
        "steps (rank, step, t_start_ns, t_end_ns, duration_s), ranks (rank, status, host, "
        "events). A query reads these views and nothing else: no writes, no other files, "
        "no extensions, no settings. csv and json stream every row; the text table shows "
        'the first --max-rows. Example: commlens query RUN "SELECT op, count(*) FROM events '
        'GROUP BY op"',
    )
    parser.add_argument("run", help="run directory")
    parser.add_argument("sql", help="the query")
    parser.add_argument(
        "--format",
        choices=("text", "csv", "json"),
        default=None,
        help="output format: text (a table), csv or json (default: from -o's suffix, else text)",
    )
    parser.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    add_width_option(parser)
    parser.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"rows the text table shows (default {DEFAULT_MAX_ROWS}); the rest are counted",
    )
    parser.set_defaults(func=run_query)


def run_query(args: argparse.Namespace) -> int:
    from commlens.analysis.query import open_query
    from commlens.report.output import output_format
    from commlens.safefile import open_binary

    if not args.sql.strip():
        raise UsageError("the query is empty")
    if args.max_rows < 1:
        raise UsageError(f"--max-rows must be at least 1, not {args.max_rows}")
    fmt = output_format(args.output, args.format)  # -o /dev/null: text
    if fmt not in ("text", "csv", "json"):
        raise UsageError(f"query output is text, csv or json, not {fmt}")
    session: QuerySession | None = None
    try:
        with open_query(args.run, quiet=False) as session:
            if args.output and args.output != "-":
                # Written as it streams: a regular file appears whole or not at all, a
                # device or FIFO is written in place (commlens.safefile).
                with open_binary(args.output) as out, session.execute(args.sql) as result:
                    _write(result, out, fmt, args)
            else:
                with session.execute(args.sql) as result:
                    _to_stdout(result, fmt, args)
    except KeyboardInterrupt:
        if session is not None and session.running:
            # DuckDB did not stop the statement in time: leaving normally would wait
            # for it at exit (minutes), so the process ends here.
            print("commlens query: interrupted", file=sys.stderr, flush=True)
            os._exit(130)
        raise
    return 0


def _write(result: QueryResult, out: IO[bytes], fmt: str, args: argparse.Namespace) -> None:
    from commlens.report.stream import FdSink, write_stream

    sink = FdSink(out)  # a full pipe never keeps Ctrl-C waiting
    write_stream(result, result.schema, sink, fmt, max_rows=args.max_rows, width=args.width)


def _to_stdout(result: QueryResult, fmt: str, args: argparse.Namespace) -> None:
    sys.stdout.flush()
    try:
        _write(result, sys.stdout.buffer, fmt, args)
    except BrokenPipeError:
        # The reader left (``| head``): let nothing flush into the closed pipe at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise
