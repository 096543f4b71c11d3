"""Completion callbacks on a backend's own threads, kept cheap.

A backend runs an op's completion callbacks on its worker thread (gloo's),
which Python does not know. pybind11 then makes a Python thread state for
each callback and frees it afterwards: about 13 µs per callback, most of what
timing an async op to completion costs. Taking one reference of our own on
that thread state (``PyGILState_Ensure``, never released) lets the first one
stay for the thread's later callbacks. One thread state per such thread is
kept until the interpreter ends.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from threading import get_ident

_KEPT: set[int] = set()


def _gilstate_ensure() -> Callable[[], object] | None:
    try:
        return ctypes.pythonapi.PyGILState_Ensure  # type: ignore[no-any-return]
    except (AttributeError, OSError):  # not CPython: callbacks just cost more
        return None


_ENSURE = _gilstate_ensure()


def keep_thread_state() -> None:
    """Keep the calling thread's Python thread state (once per thread)."""
    ident = get_ident()
    if ident in _KEPT or _ENSURE is None:
        return
    _KEPT.add(ident)
    _ENSURE()
