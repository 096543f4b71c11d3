"""SQL over Arrow tables, in one in-memory DuckDB database per process.

Each query runs on its own cursor (a connection to that database, a few ms
to open where a new database takes tens), with ``tables`` registered on that
cursor only, so queries from different threads do not see each other's.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    import duckdb


@functools.cache
def _database() -> duckdb.DuckDBPyConnection:
    import duckdb

    return duckdb.connect()


def query(sql: str, **tables: pa.Table) -> pa.Table:
    """``sql`` over ``tables`` (each registered under its keyword), as an Arrow table."""
    con = _database().cursor()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
