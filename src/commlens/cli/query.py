"""``commlens query RUN "SQL"``: read-only DuckDB over the views events, steps, ranks.

The session may read the run's views and nothing else (see
:mod:`commlens.analysis.query`); results stream to stdout batch by batch, and
Ctrl-C stops a running statement.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from commlens.errors import UsageError

if TYPE_CHECKING:
    from commlens.analysis.query import QueryResult

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
    parser.add_argument("--format", choices=("text", "csv", "json"), default=None)
    parser.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    parser.add_argument("--width", type=int, default=None, help="text width in columns")
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
    from commlens.report.formats import format_for

    if args.max_rows < 1:
        raise UsageError(f"--max-rows must be at least 1, not {args.max_rows}")
    to_file = bool(args.output) and args.output != "-"
    fmt = format_for(args.output, args.format)
    if fmt not in ("text", "csv", "json"):
        raise UsageError(f"query output is text, csv or json, not {fmt}")
    with open_query(args.run, quiet=False) as session, session.execute(args.sql) as result:
        if to_file:
            _to_file(result, args.output, fmt, args)
        else:
            _to_stdout(result, fmt, args)
    return 0


def _to_stdout(result: QueryResult, fmt: str, args: argparse.Namespace) -> None:
    from commlens.report.stream import write_stream

    schema = result.schema
    sys.stdout.flush()
    try:
        write_stream(
            result, schema, sys.stdout.buffer, fmt, max_rows=args.max_rows, width=args.width
        )
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        # The reader left (``| head``): stop here, and let nothing flush into the
        # closed pipe at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise


def _to_file(result: QueryResult, output: str, fmt: str, args: argparse.Namespace) -> None:
    import pyarrow as pa

    from commlens.report.document import Column, Document, Section
    from commlens.report.output import emit
    from commlens.report.stream import column_format

    table = pa.Table.from_batches(list(result), result.schema)
    columns = [Column(f.name, f.name, column_format(f.type)) for f in table.schema]
    doc = Document(
        title="",
        facts=[],
        sections=[Section("query", "", table, columns, max_rows=args.max_rows)],
        data={"columns": table.schema.names, "rows": table.to_pylist()},
        csv_table=table,
    )
    emit(doc, output, fmt, width=args.width)
