"""``commlens sweep FILE.toml``: run a grid of `commlens run` points, resumable."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from commlens.sweep.grid import Point
    from commlens.sweep.runner import SweepOutcome
    from commlens.sweep.spec import SweepSpec


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="run a grid of `commlens run` points from a TOML file (resumable, with a catalog)",
        description="Expand the grid of FILE.toml (model × scheme × degrees × seq-len × "
        "micro-batch × nodes × link), run each point with `commlens run` into its own "
        "directory, validate it against the model, predict it on network profiles, and "
        "keep one row per point in OUT/catalog.duckdb. Starting again skips finished "
        "points. Impossible points are recorded as skipped with the reason. "
        "See examples/study-a.toml and examples/study-b.toml.",
    )
    p.add_argument("file", help="sweep file (TOML)")
    p.add_argument("--out", type=Path, help="sweep directory (default runs/NAME)")
    p.add_argument(
        "--list", action="store_true", help="print the points and exit without running any"
    )
    p.add_argument(
        "--report", metavar="FILE", help="write the sweep report there at the end (.html, .md, ...)"
    )
    p.add_argument(
        "--recollect",
        action="store_true",
        help="measure finished points again from their runs (no training) before the catalog",
    )
    p.add_argument(
        "--figures",
        metavar="DIR",
        type=Path,
        help="write the report's plots there as PNG files (NAME-SECTION.png) at the end",
    )
    p.set_defaults(func=run)


def list_points(points: list[Point], console: Console) -> None:
    for i, p in enumerate(points, 1):
        tail = f"  [yellow]skipped: {p.skip_reason}[/]" if p.skip_reason else ""
        console.print(f"{i:3d}. {p.id}  ({p.network}){tail}", highlight=False)


def _status_line(rec: dict[str, Any]) -> str:
    if rec["status"] == "skipped":
        return f"[yellow]skipped[/] {rec['id']}: {rec['error']}"
    if rec["status"] == "failed":
        return f"[red]failed[/]  {rec['id']}: {rec['error']}"
    m = rec["result"]["metrics"]
    val = rec["result"].get("validation") or {}
    verdict = "" if not val else ("validates" if val.get("ok") else "[red]does not validate[/]")
    return (
        f"[green]done[/]    {rec['id']}: step {m['step_s']:.3f} s, "
        f"comm {m['comm_share']:.0%} of it, {m['tokens_per_s']:,.0f} tokens/s"
        + (f", link peak {m['peak_link_gbit_s']:.2f} Gbit/s" if m.get("peak_link_gbit_s") else "")
        + (f", {verdict}" if verdict else "")
    )


def execute(spec: SweepSpec, out: Path, console: Console, recollect: bool = False) -> SweepOutcome:
    """Run the sweep under a progress bar naming the point being run."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from commlens.sweep.runner import run_sweep

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("preparing", total=None)

        def listener(event: str, point: Point, rec: dict[str, Any] | None) -> None:
            if event == "start":
                progress.update(task, description=f"{point.id} ({point.network})")
            elif rec is not None:
                progress.console.print(_status_line(rec), highlight=False)
                progress.advance(task)

        from commlens.sweep.grid import expand

        points = expand(spec)
        progress.update(task, total=len(points))
        outcome = run_sweep(spec, out, listener, recollect)
        progress.update(task, completed=len(points))
    return outcome


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from commlens.sweep.spec import load_spec

    spec = load_spec(args.file)
    console = Console(highlight=False, width=max(Console().width, 110))
    if args.list:
        from commlens.sweep.grid import expand

        list_points(expand(spec), console)
        return 0
    out = args.out or Path("runs") / spec.settings.name
    old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        outcome = execute(spec, out, console, args.recollect)
    finally:
        signal.signal(signal.SIGTERM, old)
    n = len(outcome.points)
    console.print(
        f"sweep {spec.settings.name}: {n} points · {len(outcome.ran)} run now · "
        f"{len(outcome.reused)} already done · {len(outcome.skipped)} skipped · "
        f"{len(outcome.failed)} failed"
    )
    console.print(f"catalog: {out / 'catalog.duckdb'}; see `commlens report {out}`")
    if args.report:
        from commlens.sweep.report import render_sweep

        render_sweep(out, None, args.report)
        console.print(f"report: {args.report}")
    if args.figures:
        from commlens.sweep.report import save_figures

        for file in save_figures(out, args.figures, prefix=f"{spec.settings.name}-"):
            console.print(f"figure: {file}")
    return 0 if outcome.ok else 1
