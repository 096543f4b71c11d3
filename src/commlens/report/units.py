"""Units as shown in reports and on plot axes."""

from __future__ import annotations


def format_bytes(value: float) -> str:
    """Bytes with a binary-prefix unit: 4096 -> '4.0 KiB'."""
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{int(amount)} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"
