"""Link rates as users write them (``500mbit``, ``2gbit``, ``1.5Gbit/s``).

Bounds: tc's own parser takes up to 2^64-1 bytes/s, but the shaper of an
emulated link keeps its queue limit (rate x 50 ms + burst, a bfifo) in a
32-bit byte count, which wraps above ~636 Gbit/s: tc would then shape with a
silently wrong queue. Rates are therefore held to [100 kbit/s, 600 Gbit/s].
"""

from __future__ import annotations

import math
import re

from commlens.errors import UsageError

MIN_RATE_BITS = 1e5
"""Slowest link commlens shapes (100 kbit/s)."""
MAX_RATE_BITS = 600e9
"""Fastest link commlens shapes (600 Gbit/s): the 32-bit queue limit holds it."""

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)bit(?:/s)?\s*$", re.IGNORECASE)


def parse_rate(text: str) -> float:
    """Bits per second of ``text``; SI units (1gbit = 1e9 bit/s).

    Raises :class:`~commlens.errors.UsageError` (one line) for garbage and for
    rates outside [:data:`MIN_RATE_BITS`, :data:`MAX_RATE_BITS`].

    >>> parse_rate("500mbit"), parse_rate("2Gbit/s")
    (500000000.0, 2000000000.0)
    """
    match = _RATE_RE.match(text) if len(text) <= 64 else None
    if not match:
        shown = text if len(text) <= 64 else text[:61] + "..."
        raise UsageError(
            f"bad link rate {shown!r}: write a number and a unit in bits, e.g. 500mbit, 2gbit"
        )
    value = float(match[1]) * _UNITS[match[2].lower()]
    if not math.isfinite(value) or value > MAX_RATE_BITS:
        raise UsageError(
            f"link rate {text!r} is above {format_rate(MAX_RATE_BITS)}, "
            "the fastest link commlens shapes with tc here"
        )
    if value <= 0:
        raise UsageError(f"link rate {text!r} must be positive")
    if value < MIN_RATE_BITS:
        raise UsageError(f"link rate {text!r} is below 100kbit; pick a faster link")
    return value


def format_rate(bits_per_s: float) -> str:
    """The tc spelling of a rate, e.g. ``1gbit`` or ``250mbit`` (exact to 1 kbit)."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale and (bits_per_s / scale) == int(bits_per_s / scale):
            return f"{int(bits_per_s / scale)}{unit}"
    return f"{round(bits_per_s / 1e3)}kbit"
