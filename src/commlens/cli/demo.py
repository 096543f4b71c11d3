"""``commlens demo`` (what ``make demo`` runs): a small sweep, its comparison, an HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from commlens.cli.report import add_width_option
from commlens.errors import UsageError
from commlens.report.formats import PAGE_FORMATS


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the default demo: a 4-rank GPT under DP, TP and PP, slow vs fast link",
        description="Train gpt-tiny on 4 ranks under DP, TP and PP (as root: on 2 emulated "
        "nodes over a 100 Mbit/s and an unshaped link; otherwise on loopback), print how "
        "they compare and write an HTML report. A few minutes on 2 cores; starting again "
        "reuses the finished points.",
    )
    p.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="output directory (default demo-out)"
    )
    p.add_argument("--loopback", action="store_true", help="no emulated nodes, even as root")
    p.add_argument("--fresh", action="store_true", help="remove earlier demo results first")
    p.add_argument(
        "--format",
        default="text",
        choices=PAGE_FORMATS,
        help="format of the summary on stdout (default text)",
    )
    add_width_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.cli.sweep import execute, progress_console
    from commlens.report.output import emit
    from commlens.report.sweep import render_sweep
    from commlens.report.sweep_summary import demo_document
    from commlens.sweep.catalog import clear_sweep, open_catalog
    from commlens.sweep.demo import demo_plan
    from commlens.sweep.findings import link_speedup
    from commlens.sweep.spread import point_spreads

    console = progress_console(args)
    plan = demo_plan(False if args.loopback else None)
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    sweep_dir = out / "sweep"
    if args.fresh and sweep_dir.exists():
        clear_sweep(sweep_dir)  # only a sweep's own files; anything else is refused
    console.print(
        f"commlens demo: gpt-tiny, 4 ranks, DP / TP / PP over {plan.reason}", soft_wrap=True
    )
    outcome = execute(plan.spec, sweep_dir, console)
    con = open_catalog(sweep_dir)
    try:
        speedups = link_speedup(con).to_pylist()
    finally:
        con.close()
    html = out / "report.html"
    render_sweep(sweep_dir, "html", str(html))
    spreads = point_spreads(sweep_dir, [r["id"] for r in outcome.records if r["status"] == "ok"])
    doc = demo_document(outcome.records, speedups, html, sweep_dir, spreads)
    emit(doc, None, args.format, width=args.width)
    return 0 if outcome.ok else 1
