"""Latency percentiles gathered rank by rank equal DuckDB's exact ``quantile_cont``."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from commlens.analysis.codes import Codes
from commlens.analysis.quantiles import LatencyQuantiles


def test_percentiles_match_duckdb_to_the_last_bit() -> None:
    """Three 'ranks' of random latencies (some null, one key all null) under a few keys:
    the percentiles of each key equal DuckDB's over all the rows, bit for bit."""
    rng = np.random.default_rng(7)
    names = {k: Codes() for k in ("op", "pg_name", "role")}
    lat = LatencyQuantiles()
    rows: list[pa.Table] = []
    for _rank in range(3):
        n = int(rng.integers(50, 400))
        op = np.array(["all_reduce", "all_gather", "broadcast"])[rng.integers(0, 3, n)]
        pg = np.array(["0", "1"])[rng.integers(0, 2, n)]
        role = np.array(["dp", "tp"])[rng.integers(0, 2, n)]
        bucket = np.array([0, 1024, 1 << 20])[rng.integers(0, 3, n)]
        values = rng.lognormal(-8, 2, n)
        null = (rng.random(n) < 0.1) | (op == "broadcast") & (pg == "1")
        duration = pa.array(values, mask=null)
        codes = {
            k: names[k].encode(pa.array(v))
            for k, v in (("op", op), ("pg_name", pg), ("role", role))
        }
        lat.add(names, codes["op"], codes["pg_name"], codes["role"], bucket, duration)
        rows.append(
            pa.table(
                {"op": op, "pg_name": pg, "role": role, "size_bucket_bytes": bucket, "d": duration}
            )
        )
    con = duckdb.connect()
    con.register("t", pa.concat_tables(rows))
    want = {
        tuple(r[:4]): r[4]
        for r in con.execute(
            "SELECT op, pg_name, role, size_bucket_bytes, quantile_cont(d, [0.5, 0.99]) "
            "FROM t GROUP BY ALL"
        ).fetchall()
        if r[4] is not None
    }
    got = {
        (r["op"], r["pg_name"], r["role"], r["size_bucket_bytes"]): r["q"]
        for r in lat.table().to_pylist()
    }
    assert got == want
    assert len(got) > 10
