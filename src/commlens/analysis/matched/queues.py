"""Queues: when an op (or a matched instance) starts its service, by one rule.

A queue serves its items first in, first out on ``workers`` servers: an item
starts at ``max(ready, the time a server frees)`` and frees its server when it
is done. On one server that is ``start[i] = max(ready[i], release[i − 1])``
with ``release`` the running maximum of the items' done times, as on a CUDA
stream; gloo's two worker threads free at the second latest.

An op's latency then splits by one rule (:func:`latency_split`): queued on
its own queue, waiting for the last member, transfer.

Two levels use the queue rule. Per rank (:func:`queue_service`): a rank's ops on one
group are items ready at their issue and done at their end; the service
times of ops served at once are their equal shares of the time, so a
group's service times add up to the union of its intervals. Across ranks
(:func:`instance_starts`): a matched collective is ready when its last member
issued it and done at the first of its members' ends.

An op that carries its own start (a GPU kernel's start on its stream, in an
imported device trace) has been served from then: the rule gives the start
only where none was recorded (:func:`service_starts`).
"""

from __future__ import annotations

import numpy as np

from commlens.analysis.matched.intervals import segments, split_time

LOW = np.iinfo(np.int64).min


def running_max(values: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` that starts afresh wherever ``opens`` is True (the
    first row always opens)."""
    if not values.size:
        return values
    segment = np.cumsum(opens) - 1
    segment -= segment[0]
    base = int(values.min())
    span = int(values.max()) - base + 1
    if np.issubdtype(values.dtype, np.integer) and span * (int(segment[-1]) + 1) < (1 << 62):
        shift = segment.astype(np.int64) * span  # one accumulate over shifted segments
        return np.maximum.accumulate(values - base + shift) - shift + base
    out = np.empty_like(values)
    bounds = np.append(np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]]), values.size)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def fifo_starts(
    ready: np.ndarray, done: np.ndarray, opens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, release) of items on one-server FIFO queues: rows in queue order, each
    queue's first row marked by ``opens``; ``release`` the running maximum of
    ``done``, ``start[i] = max(ready[i], release[i − 1])`` (``ready`` at a queue's head)."""
    release = running_max(done, opens)
    before = np.empty_like(release)
    before[:1] = LOW
    before[1:] = release[:-1]
    return np.where(opens, ready, np.maximum(ready, before)), release


def instance_starts(
    last_issue: np.ndarray, first_end: np.ndarray, first_of_queue: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, queue release) of each matched instance, instances in queue order: one
    is ready when its last member issued it and frees its queue at the first of its
    members' ends (a member's recorded end can be late: a completion callback
    waiting for the interpreter lock; per-rank order makes the first end a safe
    bound), never before it started."""
    return fifo_starts(last_issue, np.maximum(first_end, last_issue), first_of_queue)


def queue_service(
    group: np.ndarray, s: np.ndarray, e: np.ndarray, workers: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's service start and service time on its group's queue (ns).

    Rows in issue (seq) order, of one rank. An op starts at ``max(issue, the time
    a server frees)`` (one server: the latest end of the group's earlier ops;
    two: the second latest). Ops served at once share the time equally: an op's
    service time is its share of ``[start, end]``, so the service times of a
    group's ops add up to the union of their intervals, never more (with one
    server it is ``end − start``).
    """
    small = group.size and 0 <= group.min() and group.max() < 2**15
    key = group.astype(np.int16) if small else group  # 16-bit keys: numpy's radix sort
    order = np.argsort(key, kind="stable")  # by group, each in row (issue) order
    heads = segments(key[order])
    if workers == 1:
        opens = np.zeros(order.size, bool)
        opens[heads] = True
        start = np.empty_like(s)
        start[order] = fifo_starts(s[order], e[order], opens)[0]
        start = np.minimum(start, np.maximum(e, s))
        return start, e - start
    start = s.copy()
    bounds = np.append(heads, order.size)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        idx = order[a:b]
        free = _server_free(e[idx], workers)
        start[idx[1:]] = np.maximum(s[idx[1:]], free[:-1])
    start = np.minimum(start, np.maximum(e, s))
    service = np.empty_like(start)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        idx = order[a:b]
        service[idx] = _shares(start[idx], e[idx])
    return start, service


def service_starts(
    group: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    recorded: np.ndarray | None,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's service start and time: the start it recorded (``recorded``: a device
    trace's start on its stream; ``LOW`` or below its issue where it has none), else
    :func:`queue_service`'s."""
    start, service = queue_service(group, s, e, workers)
    if recorded is None:
        return start, service
    has = recorded >= s
    start = np.where(has, np.minimum(recorded, np.maximum(e, s)), start)
    return start, np.where(has, e - start, service)


def latency_split(
    latency: np.ndarray, service: np.ndarray, ready_after: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(queued, waiting, transfer, clamped) of each member of a matched instance: its
    ``latency`` (issue to end) split into the time before its service began (on its
    own queue), the time from then until the last member was ready (``ready_after``
    that long after its own service start), and the rest of its ``service`` time,
    the transfer; each cut to ``[0, its service time]``, so the three add up to the
    latency. ``clamped``: where the last member was ready only after this one's end
    (clock skew beyond the measurement, or a root whose data was buffered)."""
    service = np.maximum(service, 0)
    wait = np.clip(ready_after, 0, service)
    return latency - service, wait, service - wait, ready_after > service


def _server_free(ends: np.ndarray, workers: int) -> np.ndarray:
    """After each op is taken, when the first of ``workers`` FIFO servers frees: the
    ``workers``-th latest end so far (1 or 2 servers)."""
    latest = np.maximum.accumulate(ends)
    if workers == 1 or ends.size < 2:
        return latest if workers == 1 else np.full(ends.size, LOW)
    # second latest of ends[:i+1] = running max of min(latest of ends[:j], ends[j])
    second = np.empty_like(ends)
    second[0] = LOW
    second[1:] = np.maximum.accumulate(np.minimum(latest[:-1], ends[1:]))
    return second


def _shares(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's share of the time, the time split equally among the intervals
    open at each moment (ns, rounded): ``F(end) − F(start)``, F the integral of 1/n."""
    alone = end - start
    if start.size < 2:
        return alone
    if np.all(start[1:] >= start[:-1]):  # first in, first out: only overlapping runs share
        overlaps = start[1:] < np.maximum.accumulate(end)[:-1]
        if not overlaps.any():
            return alone  # one at a time: each holds its whole interval
        run = np.concatenate([[0], np.cumsum(~overlaps)])
        shared = np.bincount(run)[run] > 1
        alone[shared] = split_time(start[shared], end[shared])
        return alone
    return split_time(start, end)
