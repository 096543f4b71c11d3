"""Progress of long work (bench, sweep, demo) that a log file keeps too.

On a terminal it is rich's live bar, gone when the work ends. Anywhere else
(stderr redirected to a cluster job's log, a pipe) a live bar would print
nothing, so :class:`Progress` writes plain lines instead: one when the work
being done changes (at most every ``every_s`` seconds) and, while nothing
changes, one every ``every_s`` seconds saying what is still running.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress as Bar
    from rich.progress import TaskID


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """``with Progress(console, "bench") as p: p.update("all_reduce 1M", advance=1)``."""

    def __init__(
        self, console: Console, label: str, total: int | None = None, every_s: float = 15.0
    ) -> None:
        self.console = console
        self.label = label
        self.total = total
        self.every_s = every_s
        self.done = 0
        self.description = "starting"
        self._start = time.monotonic()
        self._printed = -every_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._live = console.is_terminal
        self._bar = self._make_bar() if self._live else None
        self._task: TaskID | None = None
        if self._bar is not None:
            self._task = self._bar.add_task(self.description, total=total)
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)

    def _make_bar(self) -> Bar:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        return Bar(
            TextColumn(f"{self.label} {{task.description}}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        else:
            self._beat.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._bar is not None:
            self._bar.stop()
        elif self._beat.is_alive():
            self._beat.join()

    def set_total(self, total: int) -> None:
        self.total = total
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=total)

    def update(self, description: str, advance: int = 0, *, force: bool = False) -> None:
        """Now doing ``description`` (``advance`` items more are done); a plain line
        when ``force`` or when the last one is ``every_s`` old."""
        with self._lock:
            self.done += advance
            self.description = description
            if self._bar is not None and self._task is not None:
                self._bar.update(self._task, description=description, completed=self.done)
                return
            now = time.monotonic()
            if force or now - self._printed >= self.every_s:
                self._line(description, now)

    def advance(self, count: int = 1) -> None:
        """``count`` more items are done (no line of its own)."""
        with self._lock:
            self.done += count
            if self._bar is not None and self._task is not None:
                self._bar.update(self._task, completed=self.done)

    def print(self, line: str) -> None:
        """A line that stays (above the bar on a terminal)."""
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _line(self, description: str, now: float) -> None:
        count = f"{self.done}/{self.total}" if self.total else f"{self.done} done"
        self._printed = now
        self.print(f"{self.label}: {description} ({count}, {_elapsed(now - self._start)})")

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.every_s / 3):
            with self._lock:
                now = time.monotonic()
                if now - self._printed >= self.every_s:
                    self._line(f"{self.description}, still running", now)
