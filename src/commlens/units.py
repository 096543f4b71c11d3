"""Units and counts as every command words them: binary-prefixed bytes, singular or plural."""

from __future__ import annotations


def format_bytes(value: float) -> str:
    """Bytes with a binary-prefix unit: 4096 -> '4.0 KiB'."""
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{int(amount)} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"


def plural(count: int, noun: str, many: str = "") -> str:
    """``count`` and ``noun``, plural unless it is one: (1, 'step') -> '1 step',
    (3, 'step') -> '3 steps'; ``many`` is an irregular plural."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {many or noun + 's'}"


def ascii_int(text: str, limit: int | None = None) -> int | None:
    """``text`` as a non-negative integer written in ASCII digits (at most ``limit``),
    else None. ``str.isdigit`` also accepts "²" (which ``int`` refuses) and Arabic-Indic
    digits (which ``int`` reads): neither is a number a launcher or user writes here."""
    if not text or not text.isascii() or not text.isdigit() or len(text) > 30:
        return None
    value = int(text)
    return value if limit is None or value <= limit else None
