"""The one check of a number a user gives: finite, and inside its range.

Python's ``float()`` takes ``nan``, ``inf`` and ``1e999``; a comparison with
NaN is always false, so ``x < 0`` lets NaN through and ``abs(err) > nan`` passes
every check. Every number commlens parses from a flag or a file goes through
:func:`check_number` (or :func:`number_type`, its argparse form) instead.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from commlens.errors import UsageError

MAX_TOLERANCE = 1.0
"""The largest relative tolerance a check takes (100%): one above it holds nothing."""


def _range(low: float | None, high: float | None, low_open: bool) -> str:
    if low is not None and high is not None:
        return f"{'above' if low_open else 'at least'} {low:g} and at most {high:g}"
    if low is not None:
        return f"{'above' if low_open else 'at least'} {low:g}"
    return f"at most {high:g}" if high is not None else ""


def number_problem(
    value: float, *, low: float | None = None, high: float | None = None, low_open: bool = False
) -> str:
    """Why ``value`` is no allowed number ('' when it is): it must be finite and within
    ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    below = low is not None and (value <= low if low_open else value < low)
    if below or (high is not None and value > high):
        return f"must be {_range(low, high, low_open)}, got {value:g}"
    return ""


def check_number(
    value: float,
    what: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """``value`` as a float when finite and in range, else a one-line :class:`UsageError`
    naming ``what`` (a flag or a key)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{what} must be a number, got {value!r}") from None
    problem = number_problem(number, low=low, high=high, low_open=low_open)
    if problem:
        raise UsageError(f"{what} {problem}")
    return number


def number_type(
    *, low: float | None = None, high: float | None = None, low_open: bool = False
) -> Callable[[str], float]:
    """An argparse ``type``: the argument as a float, finite and in range (argparse's
    one-line error, exit 2, when not)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        problem = number_problem(value, low=low, high=high, low_open=low_open)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = "number"
    return parse
