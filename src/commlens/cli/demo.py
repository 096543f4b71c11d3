"""``commlens demo`` (what ``make demo`` runs): a small sweep, its comparison, an HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlens.errors import UsageError

if TYPE_CHECKING:
    from rich.table import Table


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
    p.set_defaults(func=run)


def comparison(records: list[dict[str, Any]]) -> Table:
    """One row per point: step, comm share, the scheme's key op share, validation."""
    from rich.table import Table

    table = Table(title="the demo's points (median step after warm-up)", title_justify="left")
    for col in ("scheme", "dp×tp×pp", "network", "step (s)", "comm", "key ops", "share"):
        table.add_column(col, justify="right" if col in ("step (s)", "comm", "share") else "left")
    table.add_column("validate")
    for rec in records:
        cfg = rec["config"]
        layout = f"{cfg['dp']}×{cfg['tp']}×{cfg['pp']}"
        if rec["status"] != "ok":
            table.add_row(cfg["scheme"], layout, rec["network"], "-", "-", rec["error"], "-", "-")
            continue
        m = rec["result"]["metrics"]
        ops = rec["result"]["ops"]
        key = [o for o in ops if o["op"] == "all_reduce" and o["role"] in ("dp", "tp")]
        if cfg["scheme"] == "pp":
            key = [o for o in ops if o["role"] == "pp" and o["op"] in ("recv", "all_reduce")]
        label = " + ".join(f"{o['op']}/{o['role']}" for o in key) or "-"
        share = sum(o["share_of_step"] for o in key)
        val = rec["result"].get("validation") or {}
        table.add_row(
            cfg["scheme"],
            layout,
            rec["network"],
            f"{m['step_s']:.4f}",
            f"{m['comm_share']:.0%}",
            label,
            f"{share:.0%}",
            "ok" if val.get("ok") else "MISMATCH",
        )
    return table


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from commlens.cli.sweep import execute
    from commlens.sweep.catalog import clear_sweep
    from commlens.sweep.demo import demo_plan
    from commlens.sweep.findings import link_speedup
    from commlens.sweep.report import render_sweep

    console = Console(highlight=False, width=max(Console().width, 110))
    plan = demo_plan(False if args.loopback else None)
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    sweep_dir = out / "sweep"
    if args.fresh and sweep_dir.exists():
        clear_sweep(sweep_dir)  # only a sweep's own files; anything else is refused
    console.print(f"commlens demo: gpt-tiny, 4 ranks, DP / TP / PP over {plan.reason}")
    outcome = execute(plan.spec, sweep_dir, console)
    console.print(comparison(outcome.records))
    from commlens.sweep.catalog import open_catalog

    con = open_catalog(sweep_dir)
    try:
        speed = link_speedup(con).to_pylist()
    finally:
        con.close()
    for row in speed:
        console.print(
            f"{row['scheme']}: speedup {row['speedup']:.2f}x from the {row['slowest_link']} link "
            f"to the {row['fastest_link']} one (best step {row['slowest_step_s']:.4f} s → "
            f"{row['fastest_step_s']:.4f} s)"
        )
    html = out / "report.html"
    render_sweep(sweep_dir, "html", str(html))
    console.print(f"HTML report: {html.resolve()}")
    console.print(
        f"more: `commlens report {sweep_dir}`, `commlens report {sweep_dir}/points/<point>/run`, "
        "`commlens sweep examples/study-a.toml`"
    )
    return 0 if outcome.ok else 1
