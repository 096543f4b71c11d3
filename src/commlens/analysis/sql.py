"""SQL over Arrow tables: a fresh in-memory DuckDB connection per query."""

from __future__ import annotations

import pyarrow as pa


def query(sql: str, **tables: pa.Table) -> pa.Table:
    """``sql`` over ``tables`` (each registered under its keyword), as an Arrow table."""
    import duckdb

    con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
