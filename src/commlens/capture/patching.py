"""Changes to torch that can all be undone, newest first: attribute patches and
dispatcher registrations."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class _Change:
    """One reversible change: ``undo`` puts the original back, ``redo`` the change."""

    def __init__(self, undo: Callable[[], None], redo: Callable[[], None]) -> None:
        self.undo = undo
        self.redo = redo


_saved: list[_Change] = []


def patch(target: Any, name: str, value: Any) -> None:
    """Set ``target.name = value``, remembering what was there."""
    had = name in getattr(target, "__dict__", {})
    original = getattr(target, name, None)

    def undo() -> None:
        if had or not isinstance(target, type):
            setattr(target, name, original)
        else:
            delattr(target, name)

    _saved.append(_Change(undo, lambda: setattr(target, name, value)))
    setattr(target, name, value)


def change(do: Callable[[], None], undo: Callable[[], None]) -> None:
    """Make a change other than an attribute patch (``do`` now), undone with the rest."""
    do()
    _saved.append(_Change(undo, do))


def restore_all() -> None:
    while _saved:
        _saved.pop().undo()


@contextmanager
def suspended() -> Iterator[None]:
    """Run the block with the originals in place, then make the changes again.

    For measuring: the same process, untraced, without ending the capture.
    """
    for saved in reversed(_saved):
        saved.undo()
    try:
        yield
    finally:
        for saved in _saved:
            saved.redo()


def is_patched() -> bool:
    return bool(_saved)
