"""Link rates as users write them (``500mbit``, ``2gbit``, ``1.5Gbit/s``)."""

from __future__ import annotations

import re

from commlens.errors import UsageError

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)bit(?:/s)?\s*$", re.IGNORECASE)


def parse_rate(text: str) -> float:
    """Bits per second of ``text``; SI units (1gbit = 1e9 bit/s).

    >>> parse_rate("500mbit"), parse_rate("2Gbit/s")
    (500000000.0, 2000000000.0)
    """
    match = _RATE_RE.match(text)
    if not match:
        raise UsageError(
            f"bad link rate {text!r}: write a number and a unit in bits, e.g. 500mbit, 2gbit"
        )
    value = float(match[1]) * _UNITS[match[2].lower()]
    if value < 1e5:
        raise UsageError(f"link rate {text!r} is below 100kbit; pick a faster link")
    return value


def format_rate(bits_per_s: float) -> str:
    """The tc spelling of a rate, e.g. ``1gbit`` or ``250mbit`` (exact to 1 kbit)."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale and (bits_per_s / scale) == int(bits_per_s / scale):
            return f"{int(bits_per_s / scale)}{unit}"
    return f"{round(bits_per_s / 1e3)}kbit"
