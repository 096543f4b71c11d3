"""Bench results as a rich table, tidy CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.table import Table

from commlens.bench.runner import BenchReport
from commlens.bench.sizes import format_size

COLUMNS = (
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


def to_csv(report: BenchReport) -> str:
    """One row per op and size that ran; units in the column names."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in report.measured:
        writer.writerow({key: _csv_value(row[key]) for key in COLUMNS})
    return buf.getvalue()


def _csv_value(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


def to_json(report: BenchReport) -> str:
    """Config, topology and every row (skipped ones say why)."""
    return json.dumps(report.to_dict(), indent=2) + "\n"


def to_table(report: BenchReport) -> Table:
    """nccl-tests-like table: latency in µs, bandwidths in GB/s and Gbit/s."""
    cfg = report.config
    where = f"{cfg.nproc} ranks on {cfg.nodes} node{'s' if cfg.nodes > 1 else ''}"
    if cfg.link:
        where += f", link {cfg.link}"
    table = Table(title=f"commlens bench: {where}, {cfg.dtype}, {cfg.iters} iters")
    headers = [
        "op",
        "size",
        "mean (µs)",
        "p50 (µs)",
        "p99 (µs)",
        "min (µs)",
        "max (µs)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "busbw (Gbit/s)",
        "check",
    ]
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    last_op = None
    for row in report.rows:
        if last_op is not None and row["op"] != last_op:
            table.add_section()
        last_op = row["op"]
        head = [row["op"], format_size(row["size_bytes"])]
        if "skipped" in row:
            table.add_row(*head, *([""] * 8), f"[dim]skipped: {row['skipped']}[/dim]")
            continue
        times = [
            f"{row[k] * 1e6:,.1f}"
            for k in ("time_mean_s", "time_p50_s", "time_p99_s", "time_min_s", "time_max_s")
        ]
        bws = [f"{row['algbw_GB/s']:.3f}", f"{row['busbw_GB/s']:.3f}", f"{row['busbw_Gbit/s']:.3f}"]
        check = "ok" if row["ok"] else "[bold red]WRONG[/bold red]"
        table.add_row(*head, *times, *bws, check)
    return table
