"""Attribute patches that can all be undone, newest first."""

from __future__ import annotations

from typing import Any

_saved: list[tuple[Any, str, Any, bool]] = []


def patch(target: Any, name: str, value: Any) -> None:
    """Set ``target.name = value``, remembering what was there."""
    had = name in getattr(target, "__dict__", {})
    _saved.append((target, name, getattr(target, name, None), had))
    setattr(target, name, value)


def restore_all() -> None:
    while _saved:
        target, name, value, had = _saved.pop()
        if had or not isinstance(target, type):
            setattr(target, name, value)
        else:
            delattr(target, name)


def is_patched() -> bool:
    return bool(_saved)
