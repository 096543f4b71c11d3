"""Which steps a report's headline figures cover, and the sentence that says so.

By default the headline leaves out set-up (the set-up window, step −1, and
events before the first recorded step), warm-up (the steps a ``commlens
run`` manifest flags ``warmup``, else the first step) and anything after the
last recorded step, as ``commlens run``'s own summary does; the tables still
show every step. A ``--steps`` range chosen by the user is used as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlens.analysis.typical import warmup_steps
from commlens.trace.reader import RunView, StepRange


@dataclass(frozen=True)
class Coverage:
    """The headline's steps: ``steps`` to open the run with (None: the view's own
    events, all of them), and ``line``, what they are in words."""

    steps: StepRange | None
    line: str


def _span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}–{last}"


def headline_coverage(view: RunView) -> Coverage:
    """The steps the headline covers for ``view`` (see the module docstring)."""
    row = view.row(  # steps < 0: the set-up window, never a step of the job
        "SELECT min(step), max(step), count(DISTINCT step) FROM all_steps WHERE step >= 0"
    )
    lo, hi, n = row if row is not None else (None, None, 0)
    if view.steps is not None:
        first, stop = view.steps
        a = first if first is not None else lo
        b = stop - 1 if stop is not None else hi
        chosen = f"{_span(a, b)} (--steps)" if a is not None and b is not None else "--steps"
        return Coverage(None, f"headline covers {chosen}")
    if lo is None or hi is None:
        return Coverage(None, "headline covers every event (the run recorded no steps)")
    total = f"of {n} recorded step{'s' if n != 1 else ''}"
    if n < 2:
        return Coverage(None, f"headline covers {_span(lo, hi)} {total} (no warm-up to leave out)")
    warm = {s for s in warmup_steps(view.manifest) if lo <= s < hi}
    first = max(warm | {lo}) + 1
    left_out = f"warm-up steps {min(warm | {lo})}–{first - 1}" if first - 1 > lo else f"step {lo}"
    return Coverage(
        (first, hi + 1),
        f"headline covers {_span(first, hi)} {total}; {left_out}, set-up and anything "
        "after the last step left out (--steps to change)",
    )
