"""Per-rank work spread over processes: a run's ranks in contiguous chunks, one a worker.

:func:`map_chunks` splits a list of ranks into as many contiguous chunks as
there are workers, runs a function on each chunk in a pool of forked
processes and gives the results back in chunk order, so that merging them in
that order is merging them in rank order: the output never depends on the
number of workers. With one worker (one core, few ranks, ``COMMLENS_JOBS=1``,
or a platform without ``fork``) the function runs in this process on the
whole list. The workers are forked, so the function and what it reads (an
opened run) are inherited, not sent; only each chunk's result comes back
(pickled).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from commlens.errors import UsageError

if TYPE_CHECKING:
    from commlens.trace.reader import RunView

T = TypeVar("T")
R = TypeVar("R")

JOBS_ENV = "COMMLENS_JOBS"
"""Environment variable: the most worker processes a command may use (default: the
cores this process may run on)."""

_TASK: tuple[Callable[..., Any], list[list[Any]]] | None = None
"""The function and the chunks of the pool being run (inherited by its forked workers)."""
_IN_WORKER = False


def in_worker() -> bool:
    """Whether this process is a worker of :func:`map_chunks` (objects it inherited,
    such as a run's DuckDB connection, are the parent's: not to be used)."""
    return _IN_WORKER


def detach(view: RunView) -> list[tuple[int, str]]:
    """In a worker, the run ``view`` it inherited is the parent's (its DuckDB connection
    not to be used here): from now on a rank file found damaged is noted in the list
    returned, (rank, reason), for the parent to drop, and warnings are left for the
    parent to print."""
    damaged: list[tuple[int, str]] = []

    def note(rank: int, reason: str) -> str:
        damaged.append((rank, reason))
        return reason

    view.drop_rank = note  # type: ignore[method-assign]
    view.quiet = True
    return damaged


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def jobs() -> int:
    """The most worker processes to use: ``COMMLENS_JOBS`` when set (at least 1), else
    the cores this process may run on."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise UsageError(f"{JOBS_ENV}={value!r} is not a whole number") from None
    return cores()


def workers(items: int, least: int) -> int:
    """How many workers ``items`` items get: one per ``least`` items at most, at most
    :func:`jobs`, at least 1; 1 where processes cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(jobs(), items // max(1, least)))


def chunks(items: Sequence[T], n: int) -> list[list[T]]:
    """``items`` in ``n`` contiguous chunks of near-equal length (none empty)."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, at = [], 0
    for i in range(n):
        width = size + (1 if i < extra else 0)
        out.append(list(items[at : at + width]))
        at += width
    return out


def map_chunks(fn: Callable[[list[T]], R], items: Sequence[T], *, least: int = 1) -> list[R]:
    """``fn`` of each contiguous chunk of ``items``, in chunk order: one chunk per worker
    (:func:`workers`, ``least`` items a worker at least); with one worker, ``[fn(items)]``
    in this process."""
    n = workers(len(items), least)
    if n == 1:
        return [fn(list(items))]
    global _TASK
    parts = chunks(items, n)
    _TASK = (fn, parts)
    try:
        with ProcessPoolExecutor(
            len(parts), mp_context=multiprocessing.get_context("fork")
        ) as pool:
            futures = [pool.submit(_run_chunk, i) for i in range(len(parts))]
            return [f.result() for f in futures]
    finally:
        _TASK = None


def _run_chunk(index: int) -> Any:
    """In a worker: the inherited function of chunk ``index``."""
    global _IN_WORKER
    _IN_WORKER = True
    assert _TASK is not None
    fn, parts = _TASK
    return fn(parts[index])
