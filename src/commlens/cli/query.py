"""``commlens query RUN "SQL"``: DuckDB over the views events, steps, ranks."""

from __future__ import annotations

import argparse
from typing import Any

from commlens.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "query",
        help="SQL (DuckDB) over a run's events, steps and ranks",
        description="Views: events (one row per op, times on rank 0's clock), "
        "steps (rank, step, t_start_ns, t_end_ns, duration_s), ranks (rank, status, host, "
        'events). Example: commlens query RUN "SELECT op, count(*) FROM events GROUP BY op"',
    )
    parser.add_argument("run", help="run directory")
    parser.add_argument("sql", help="the query")
    parser.add_argument("--format", choices=("text", "csv", "json"), default="text")
    parser.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    parser.add_argument("--width", type=int, default=None, help="text width in columns")
    parser.set_defaults(func=run_query)


def _fmt(dtype: Any) -> str:
    import pyarrow as pa

    numeric = pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
    return "num" if numeric or pa.types.is_decimal(dtype) else "str"


def run_query(args: argparse.Namespace) -> int:
    import duckdb
    import pyarrow as pa

    from commlens.analysis.source import open_run
    from commlens.report.document import Column, Document, Section
    from commlens.report.output import emit

    view = open_run(args.run, quiet=False)
    try:
        try:
            relation = view.con.sql(args.sql)
            table = relation.to_arrow_table() if relation is not None else pa.table({})
        except duckdb.Error as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"query failed: {message}") from None
    finally:
        view.close()
    columns = [
        Column(name, name, _fmt(table.schema.field(name).type)) for name in table.schema.names
    ]
    doc = Document(
        title="",
        facts=[],
        sections=[Section("query", "", table, columns)],
        data={"columns": table.schema.names, "rows": table.to_pylist()},
        csv_table=table,
    )
    emit(doc, args.output, args.format, width=args.width)
    return 0
