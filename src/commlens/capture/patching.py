"""Attribute patches that can all be undone, newest first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_saved: list[tuple[Any, str, Any, bool]] = []


def patch(target: Any, name: str, value: Any) -> None:
    """Set ``target.name = value``, remembering what was there."""
    had = name in getattr(target, "__dict__", {})
    _saved.append((target, name, getattr(target, name, None), had))
    setattr(target, name, value)


def _put_back(target: Any, name: str, value: Any, had: bool) -> None:
    if had or not isinstance(target, type):
        setattr(target, name, value)
    else:
        delattr(target, name)


def restore_all() -> None:
    while _saved:
        _put_back(*_saved.pop())


@contextmanager
def suspended() -> Iterator[None]:
    """Run the block with the originals in place, then patch again.

    For measuring: the same process, untraced, without ending the capture.
    """
    current = [(target, name, getattr(target, name)) for target, name, _, _ in _saved]
    for saved in reversed(_saved):
        _put_back(*saved)
    try:
        yield
    finally:
        for target, name, value in current:
            setattr(target, name, value)


def is_patched() -> bool:
    return bool(_saved)
