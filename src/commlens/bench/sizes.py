"""Message sizes as users write them: ``8:64M`` (doubling), ``8:64M:4`` (×4), ``1K,1M``.

Units are binary, as in nccl-tests: ``K`` = 1024 bytes, ``M`` = 1024², ``G`` = 1024³.
"""

from __future__ import annotations

import re

from commlens.errors import UsageError
from commlens.units import ascii_int

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)(i?b)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MAX_SIZES = 64
MAX_SIZE_BYTES = 1 << 36
"""Largest message a bench runs: 64 GiB (nccl-tests sweeps stop at a few GiB)."""


def parse_size(text: str) -> int:
    """Bytes of ``text`` (``64M`` → 67108864)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"bad size {text!r}: write bytes with an optional K, M or G, e.g. 64M")
    value = int(match[1]) * _SCALE[match[2].lower()]
    if value <= 0:
        raise UsageError(f"size {text!r} must be positive")
    if value > MAX_SIZE_BYTES:
        raise UsageError(
            f"size {text!r} is above the largest message, {format_size(MAX_SIZE_BYTES)}"
        )
    return value


def parse_sizes(text: str) -> list[int]:
    """Sorted, distinct sizes in bytes from a range ``MIN:MAX[:FACTOR]`` or a list."""
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise UsageError(f"bad --sizes {text!r}: use MIN:MAX, MIN:MAX:FACTOR or a list")
        low, high = parse_size(parts[0]), parse_size(parts[1])
        factor = ascii_int(parts[2].strip(), 1 << 20) if len(parts) == 3 else 2
        if factor is None or factor < 2:
            raise UsageError(f"bad --sizes factor {parts[2]!r}: an integer of at least 2")
        if low > high:
            raise UsageError(f"bad --sizes {text!r}: MIN is larger than MAX")
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= factor
    else:
        sizes = sorted({parse_size(item) for item in text.split(",") if item.strip()})
        if not sizes:
            raise UsageError("--sizes is empty")
    if len(sizes) > MAX_SIZES:
        raise UsageError(f"--sizes {text!r} gives {len(sizes)} sizes; at most {MAX_SIZES}")
    return sizes


def format_size(size: int) -> str:
    """``67108864`` → ``64M``; sizes that are not a whole K/M/G stay in bytes."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)
