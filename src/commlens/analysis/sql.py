"""SQL over Arrow tables, in one in-memory DuckDB database per process.

Each query runs on its own cursor (a connection to that database, a few ms
to open where a new database takes tens), with ``tables`` registered on that
cursor only, so queries from different threads do not see each other's. The
tables are small: one thread, so sums of floats come out the same every time. A
forked child opens a database of its own: DuckDB's threads do not survive a
fork, and the parent's is left untouched (closing it in the child crashes).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    import duckdb

_DATABASES: dict[int, duckdb.DuckDBPyConnection] = {}
"""pid -> the database that process opened."""


def _database() -> duckdb.DuckDBPyConnection:
    import duckdb

    pid = os.getpid()
    if pid not in _DATABASES:
        _DATABASES[pid] = duckdb.connect(config={"threads": 1})
    return _DATABASES[pid]


def query(sql: str, **tables: pa.Table) -> pa.Table:
    """``sql`` over ``tables`` (each registered under its keyword), as an Arrow table."""
    con = _database().cursor()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
