"""Query a sweep's DuckDB catalog directly: the studies' headline numbers.

    commlens sweep examples/study-a.toml --out runs/study-a
    commlens sweep examples/study-b.toml --out runs/study-b
    python examples/sweep_catalog.py runs/study-a runs/study-b

Every `commlens sweep` directory holds ``catalog.duckdb`` with the tables
``points`` (one row per point), ``ops``, ``sizes`` and ``predictions``; the
same findings the report shows are functions of :mod:`commlens.sweep.findings`.
"""

from __future__ import annotations

import sys

from commlens.sweep import findings, open_catalog


def summarize(path: str) -> None:
    con = open_catalog(path)
    try:
        print(f"== {path}")
        for status, n in con.execute(
            "SELECT status, count(*) FROM points GROUP BY status ORDER BY status"
        ).fetchall():
            print(f"   {n} points {status}")
        for r in findings.link_speedup(con).to_pylist():
            print(
                f"   {r['model']:<10} {r['scheme']:<4} {r['slowest_link']} → {r['fastest_link']}: "
                f"{r['speedup']:.2f}x"
            )
        for r in findings.zero_ratio(con).to_pylist():
            print(f"   {r['scheme']} / dp at s={r['seq_len']}: {r['ratio_to_dp']:.3f}")
        # plain SQL works too: the busiest op of every point
        rows = con.execute(
            """
            SELECT id, arg_max(op || '/' || role, wire_bytes_per_rank_step),
                   max(wire_bytes_per_rank_step)
            FROM ops GROUP BY id ORDER BY id
            """
        ).fetchall()
        for point, op, wire in rows:
            print(f"   {point}: {op} {wire / 1e6:.3f} MB per rank per step")
    finally:
        con.close()


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["runs/study-a", "runs/study-b"]:
        summarize(arg)
