"""What a run's times say that cannot be, found once when the run is opened.

Found as a run is read, these join the run's warnings, one line each, naming
the rank and the (first) step: the windows when the run is opened
(:func:`commlens.trace.reader.open_run`), the events as the commands read each
rank's times (:meth:`commlens.trace.reader.RunView.check_times`: the rank pass
behind ``report``, ``compare``, ``run``'s summary and ``sweep``, and
``whatif``'s reader):

- a step window that ends before it starts (the window is left out of the
  ``steps`` view: the step's time becomes the span of its ops);
- events that end before they are issued;
- events far outside their rank's recording (``t_start_ns`` .. ``t_end_ns``
  of the rank in ``run.json``, on the rank's own clock): times of 0, a clock
  moved by years.

``report`` and the other tables go on (a share is cut to its window either
way); ``whatif`` refuses such a run (:attr:`~commlens.trace.reader.RunView.
problems`): a replay of times that cannot be is no answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commlens.trace.manifest import Manifest

SLACK_NS = 10 * 10**9
"""How far outside its rank's recording an event may lie (start-up and the end of
the capture are stamped a little apart from the events); beyond it the event's
time is wrong."""


def window_problems(manifest: Manifest) -> list[str]:
    """A line per rank whose step windows end before they start."""
    lines = []
    for rank, info in sorted(manifest.ranks.items()):
        bad = [w for w in info.steps if w.t_end_ns < w.t_start_ns]
        if bad:
            first = bad[0]
            lines.append(
                f"rank {rank}, step {first.step}: its step window ends "
                f"{(first.t_start_ns - first.t_end_ns) / 1e9:.6f} s before it starts"
                + (f" (and {len(bad) - 1} more of its steps)" if len(bad) > 1 else "")
                + "; left out"
            )
    return lines


def recording(manifest: Manifest, rank: int) -> tuple[int, int | None] | None:
    """Rank ``rank``'s recording on its own clock, widened by :data:`SLACK_NS`: (first,
    last) time an event of it may hold (last None when unknown); None when its start is
    unknown too."""
    entries: Any = manifest.data.get("ranks")
    entry = entries.get(str(rank)) if isinstance(entries, dict) else None
    entry = entry if isinstance(entry, dict) else {}
    start, end = entry.get("t_start_ns"), entry.get("t_end_ns")
    info = manifest.ranks.get(rank)
    starts = [w.t_start_ns for w in info.steps if w.t_end_ns >= w.t_start_ns] if info else []
    lo = start if isinstance(start, int) and not isinstance(start, bool) else None
    lo = lo if lo is not None else (min(starts) if starts else None)
    if lo is None:
        return None
    hi = end if isinstance(end, int) and not isinstance(end, bool) and end >= lo else None
    return lo - SLACK_NS, None if hi is None else hi + SLACK_NS


def event_problems(
    rank: int,
    step: np.ndarray,
    t_issue: np.ndarray,
    t_end: np.ndarray,
    span: tuple[int, int | None] | None,
) -> list[str]:
    """Lines for one rank's events (their steps and times, on the clock of ``span``, its
    :func:`recording`) that end before they are issued, or lie outside its recording."""
    lines = []
    backwards = t_end < t_issue
    if backwards.any():
        lines.append(
            f"rank {rank}, step {int(step[backwards].min())}: {int(backwards.sum())} event(s) "
            "end before they are issued"
        )
    if span is not None and t_issue.size:
        lo, hi = span
        if t_issue.min() >= lo and (hi is None or t_end.max() <= hi):
            return lines  # every event inside: no per-event distances to find
        far = np.maximum(lo - t_issue, 0)
        if hi is not None:
            far = np.maximum(far, t_end - hi)
        outside = far > 0
        if outside.any():
            lines.append(
                f"rank {rank}, step {int(step[outside].min())}: {int(outside.sum())} event(s) "
                f"lie outside the rank's recording, up to {_duration(int(far.max()) + SLACK_NS)} "
                "away (a wrong clock or times of 0)"
            )
    return lines


def _duration(ns: int) -> str:
    s = ns / 1e9
    if s >= 2 * 86400 * 365:
        return f"{s / (86400 * 365):.1f} years"
    if s >= 2 * 86400:
        return f"{s / 86400:.1f} days"
    return f"{s:.1f} s"
