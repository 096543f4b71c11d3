"""Compiling the replay's kernels (:mod:`~commlens.whatif.engine`, :mod:`~commlens.whatif.links`,
:mod:`~commlens.whatif.buckets`).

The kernels are plain Python on numpy arrays, compiled by numba on first use and
kept in numba's cache: beside the modules where their folder is writable, else
in the user's cache folder (``NUMBA_CACHE_DIR`` where set). A cached kernel is
taken only while every kernel module is as it was when it was compiled (numba
itself checks only the module of the function, and a kernel has the code of the
kernels it calls in it). Where no cache can be kept, or one cannot be read or
written, the kernels are compiled in the process; with ``NUMBA_DISABLE_JIT=1``
they run as the Python they are (the tests compare the two).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numba
import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

MODULES = ("compiled.py", "buckets.py", "links.py", "engine.py")
"""The kernel modules, whose code a cached kernel depends on."""
SOURCES = hashlib.sha256(
    b"".join((Path(__file__).parent / name).read_bytes() for name in MODULES)
).hexdigest()


def kernel(func: F) -> F:
    """``func`` compiled (no fast-math: every float operation as written, in order),
    cached on disk where numba can keep a cache, called by other kernels only."""
    # without the wrapper that would let Python call it (unboxing every array of the
    # state: a fifth of the compile time)
    return _compiled(func, no_cpython_wrapper=True, no_cfunc_wrapper=True)


def inline(func: F) -> F:
    """:func:`kernel`, compiled into its one caller (a call hands every array of the
    state over)."""
    return _compiled(func, inline="always", no_cpython_wrapper=True, no_cfunc_wrapper=True)


def entry(func: F) -> F:
    """:func:`kernel`, called from Python."""
    return _compiled(func)


def _compiled(func: F, **options: Any) -> F:
    # the kernels allocate nothing: without numba's reference counting of the arrays
    # they are handed (an atomic count at each use of a tuple of arrays: 85% of the time)
    options["_nrt"] = False
    try:
        dispatcher = numba.njit(cache=True, **options)(func)
    except RuntimeError:  # no folder to keep the cache in: compiled in each process
        return numba.njit(**options)(func)  # type: ignore[no-any-return]
    cache = getattr(dispatcher, "_cache", None)
    index = getattr(cache, "_cache_file", None)
    if index is not None and hasattr(
        index, "_source_stamp"
    ):  # numba's stamp of the function's own module
        index._source_stamp = (index._source_stamp, SOURCES)
        dispatcher._cache = _Cache(cache)
    return dispatcher  # type: ignore[no-any-return]


class _Cache:
    """numba's cache of one kernel: a cached kernel that cannot be read is compiled,
    one that cannot be written is not kept (the command goes on either way)."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def load_overload(self, *args: Any) -> Any:
        try:
            return self._cache.load_overload(*args)
        except Exception:  # a cache file unreadable or of another version: written anew
            with contextlib.suppress(Exception):
                os.remove(self._cache._cache_file._index_path)
            return None

    def save_overload(self, *args: Any) -> None:
        try:
            self._cache.save_overload(*args)
        except Exception:  # a folder that became unwritable, a full disk
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


@kernel
def larger(a: float, b: float) -> float:
    """Python's ``max(a, b)``: ``a`` unless ``b`` is larger."""
    return b if b > a else a


@kernel
def smaller(a: float, b: float) -> float:
    """Python's ``min(a, b)``: ``a`` unless ``b`` is smaller."""
    return b if b < a else a


@kernel
def index(i: Any) -> int:
    """``i`` as a 64-bit integer: each kernel taking an index compiled once, whatever
    array the index came from."""
    return np.int64(i)  # type: ignore[return-value]
