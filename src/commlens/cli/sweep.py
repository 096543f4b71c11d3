"""``commlens sweep FILE.toml``: run a grid of `commlens run` points, resumable."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlens.cli.report import add_width_option
from commlens.report.formats import PAGE_FORMATS

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
    p.add_argument(
        "--format",
        default="text",
        choices=PAGE_FORMATS,
        help="format of the summary on stdout (default text)",
    )
    add_width_option(p)
    p.set_defaults(func=run)


def execute(spec: SweepSpec, out: Path, console: Console, recollect: bool = False) -> SweepOutcome:
    """Run the sweep under a progress bar naming the point being run (on a console that
    is no terminal: a line as each point starts, and one every so often while it runs)."""
    from commlens.cli.progress import Progress
    from commlens.report.sweep_summary import status_line
    from commlens.sweep.grid import expand
    from commlens.sweep.runner import run_sweep

    points = expand(spec)
    with Progress(console, "sweep", total=len(points), every_s=30.0) as progress:

        def listener(event: str, point: Point, rec: dict[str, Any] | None) -> None:
            if event == "start":
                progress.update(f"running {point.id} ({point.network})", force=True)
            elif rec is not None:
                progress.print(status_line(rec))
                progress.advance()

        return run_sweep(spec, out, listener, recollect)


def progress_console(args: argparse.Namespace) -> Console:
    """Where progress lines go: stdout beside a text summary, else stderr; as wide as
    --width or the terminal."""
    from rich.console import Console

    from commlens.report.text import default_width

    return Console(
        stderr=args.format != "text", highlight=False, width=args.width or default_width()
    )


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:

    from commlens.report.output import emit
    from commlens.report.sweep_summary import outcome_document, points_document
    from commlens.sweep.grid import expand
    from commlens.sweep.spec import load_spec

    spec = load_spec(args.file)
    name = spec.settings.name
    if args.list:
        emit(points_document(name, expand(spec)), None, args.format, width=args.width)
        return 0
    console = progress_console(args)
    out = args.out or Path("runs") / name
    old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        outcome = execute(spec, out, console, args.recollect)
    finally:
        signal.signal(signal.SIGTERM, old)
    figures: list[Path] = []
    if args.report:
        from commlens.report.sweep import render_sweep

        render_sweep(out, None, args.report)
    if args.figures:
        from commlens.report.sweep import save_figures

        figures = save_figures(out, args.figures, prefix=f"{name}-")
    emit(outcome_document(name, outcome, args.report, figures), None, args.format, width=args.width)
    return 0 if outcome.ok else 1
