"""What ``commlens bench`` prints: latency and bandwidth per op and size (nccl-tests-like).

Text, Markdown and HTML show latencies in µs and bandwidths in GB/s and
Gbit/s; the JSON is :meth:`BenchReport.to_dict` (config, topology, every row,
skipped ones saying why); the CSV is one row per op and size that ran, with
the units in the column names (:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from commlens.bench.sizes import format_size
from commlens.report.document import Column, Document, Section
from commlens.units import plural

if TYPE_CHECKING:
    from commlens.bench.fit import OpFit
    from commlens.bench.runner import BenchReport

CSV_COLUMNS = (
    "op",
    "size_bytes",
    "count",
    "dtype",
    "ranks",
    "nodes",
    "iters",
    "time_min_s",
    "time_mean_s",
    "time_max_s",
    "time_p50_s",
    "time_p99_s",
    "algbw_GB/s",
    "busbw_GB/s",
    "busbw_Gbit/s",
    "ok",
)
_TIMES = ("time_mean_s", "time_p50_s", "time_p99_s", "time_min_s", "time_max_s")
_BANDWIDTHS = ("algbw_GB/s", "busbw_GB/s", "busbw_Gbit/s")
COLUMNS = (
    Column("op", "op"),
    Column("size", "size", align="right"),
    *(Column(key, f"{key[5:-2]} (µs)", "{:,.1f}") for key in _TIMES),
    Column("algbw_GB/s", "algbw (GB/s)", "{:.3f}"),
    Column("busbw_GB/s", "busbw (GB/s)", "{:.3f}"),
    Column("busbw_Gbit/s", "busbw (Gbit/s)", "{:.3f}"),
    Column("check", "check"),
)


def _check(row: dict[str, Any]) -> str:
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    return "ok" if row["ok"] else "WRONG"


def _csv_table(report: BenchReport) -> pa.Table:
    """The measured rows as text, floats to 6 significant digits."""

    def cell(value: Any) -> str:
        return f"{value:.6g}" if isinstance(value, float) else str(value)

    rows = report.measured
    return pa.table(
        {key: pa.array([cell(r[key]) for r in rows], pa.string()) for key in CSV_COLUMNS}
    )


def bench_document(report: BenchReport) -> Document:
    """The bench results, one row per op and size (a rule between ops)."""
    cfg = report.config
    where = f"{plural(cfg.nproc, 'rank')} on {plural(cfg.nodes, 'node')}"
    if cfg.link:
        where += f", link {cfg.link}"
    rows = report.rows
    columns: dict[str, list[Any]] = {
        "op": [r["op"] for r in rows],
        "size": [format_size(r["size_bytes"]) for r in rows],
        "check": [_check(r) for r in rows],
    }
    for key in _TIMES:
        columns[key] = [None if "skipped" in r else r[key] * 1e6 for r in rows]
    for key in _BANDWIDTHS:
        columns[key] = [None if "skipped" in r else float(r[key]) for r in rows]
    table = pa.table({c.key: pa.array(columns[c.key]) for c in COLUMNS})
    link = link_gbit(cfg.link)
    return Document(
        title=f"commlens bench: {where}, {cfg.dtype}, {plural(cfg.iters, 'iter')}",
        headline=bench_headline(report.measured, link),
        lead=("busbw vs message size", lambda: _busbw_plot(report.measured, link)),
        sections=[Section("results", "", table, COLUMNS, group_by="op")],
        data=report.to_dict(),
        csv_table=_csv_table(report),
    )


def fit_line(f: OpFit) -> str:
    """One op's fitted alpha-beta line: latency in µs, rate in GB/s, and how well it fits."""
    quality = f"(r2 {f.r2:.4f}, max error {f.max_rel_err:.1%})"
    if f.flat:
        return (
            f"fit {f.op}: t = {f.intercept_s * 1e6:.1f} µs, flat over its sizes, so the "
            f"link's rate per byte {quality}"
        )
    rate = 1 / f.slope_s_per_byte / 1e9
    return f"fit {f.op}: t = {f.intercept_s * 1e6:.1f} µs + S / {rate:.3f} GB/s {quality}"


def link_gbit(link: str | None) -> float | None:
    """The emulated link's rate in Gbit/s (None: unshaped or loopback)."""
    if not link or link == "unshaped":
        return None
    from commlens.netem.rate import parse_rate

    return parse_rate(link) / 1e9


def bench_headline(rows: list[dict[str, Any]], link: float | None) -> list[str]:
    """Per op: the highest busbw and where, and the latency of the smallest message."""
    lines = []
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        best = max(mine, key=lambda r: float(r["busbw_Gbit/s"]))
        small = min(mine, key=lambda r: r["size_bytes"])
        of_link = f" ({float(best['busbw_Gbit/s']) / link:.0%} of the link)" if link else ""
        lines.append(
            f"{op}: busbw up to {float(best['busbw_Gbit/s']):.3f} Gbit/s{of_link} at "
            f"{format_size(best['size_bytes'])}; {small['time_p50_s'] * 1e6:,.1f} µs (p50) "
            f"at {format_size(small['size_bytes'])}"
            + ("" if all(r["ok"] for r in mine) else "; WRONG results at some sizes")
        )
    return lines


def _busbw_plot(rows: list[dict[str, Any]], link: float | None) -> Any:
    from commlens.report import plots

    return plots.bench_busbw(rows, link)
