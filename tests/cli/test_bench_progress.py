"""Progress of long work stays in a log: plain timed lines when stderr is no terminal."""

from __future__ import annotations

import io
import time

from rich.console import Console

from commlens.cli.progress import Progress


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=100), out


def test_plain_lines_when_forced_and_at_most_every_period() -> None:
    console, out = _console()
    with Progress(console, "bench", total=3, every_s=60.0) as p:
        p.update("starting 2 ranks", force=True)
        p.update("all_reduce 8 B done", advance=1)  # too soon after the last line: quiet
        p.update("all_reduce 16 B done", advance=1, force=True)
        p.advance()  # counted, no line
        p.print("a line that stays")
        p.update("all_reduce 32 B done", force=True)
    lines = out.getvalue().splitlines()
    assert lines == [
        "bench: starting 2 ranks (0/3, 0s)",
        "bench: all_reduce 16 B done (2/3, 0s)",
        "a line that stays",
        "bench: all_reduce 32 B done (3/3, 0s)",
    ]


def test_a_heartbeat_while_nothing_changes() -> None:
    console, out = _console()
    with Progress(console, "sweep", total=2, every_s=0.3) as p:
        p.update("running point-a", force=True)
        time.sleep(1.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep: running point-a (0/2, 0s)"
    assert len(lines) >= 2 and all("running point-a, still running (0/2" in x for x in lines[1:])


def test_a_live_bar_on_a_terminal_leaves_no_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with Progress(console, "bench", total=1) as p:
        p.update("all_reduce 8 B done", advance=1, force=True)
    assert "bench: all_reduce 8 B done (1/1" not in out.getvalue()  # the bar, not a line
