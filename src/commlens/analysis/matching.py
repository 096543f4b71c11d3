"""Collectives matched across the ranks of their group, in numpy, summed per rank and step.

A collective instance is the k-th collective call on a group (``pg_name``,
k) in each rank, in sequence order: the matched run's one rule
(:mod:`commlens.analysis.matched.match`), applied to the rank pass's
per-rank arrays. :func:`match_calls` gives each instance its dense id and
gathers the arrivals by scattering each rank's calls onto those ids, without
sorting all events; an instance counts where every member recorded it and
all recorded the same op. Then it sums wait and transfer per (op, group,
role), per rank and per step (see :mod:`commlens.analysis.skew` for what
they mean).

Each instance also keeps ``ready``: the latest service start over its members
(when the last member's op reached the head of its group's queue). A member's
time waiting for peers is ``ready − own service start``, clamped to
``[0, own service time]``; its transfer is the rest of its service time, so
queued + waiting + transfer = its latency, each never negative.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

from commlens.analysis.codes import dense_codes
from commlens.analysis.matched.match import Numbering, agreement, kth, numbering
from commlens.analysis.matched.queues import latency_split

if TYPE_CHECKING:
    from commlens.trace.reader import StepRange

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class MatchPart:
    """One rank's collective calls that can be matched across ranks.

    Times after the issue are kept as offsets from it, and counts, in 32 bits
    where they fit (:func:`compact`): these arrays hold a number or so per
    collective call of the run until the matching is summed.
    """

    rank: int
    pairs: np.ndarray  # the distinct global group codes of this rank's calls
    pair: np.ndarray  # each call's index into ``pairs``
    k: np.ndarray  # 0-based: the k-th collective call on that group in this rank
    op: np.ndarray  # global op code
    triple: np.ndarray  # global (op, group, role) code
    seq: np.ndarray
    step: np.ndarray
    size: np.ndarray  # group size
    t_issue: np.ndarray
    queued: np.ndarray  # service start on the group's queue − issue (see rankpass)
    latency: np.ndarray  # t_end − t_issue
    nbytes: np.ndarray  # size_bytes of each call
    service: np.ndarray | None = None  # service time where it is not t_end − t_start

    @property
    def t_start(self) -> np.ndarray:
        return self.t_issue + self.queued

    @property
    def t_end(self) -> np.ndarray:
        return self.t_issue + self.latency


def compact(values: np.ndarray) -> np.ndarray:
    """``values`` as 32-bit integers where they all fit, else as they are."""
    small = values.size == 0 or (values.min() >= -(2**31) and values.max() < 2**31)
    return values.astype(np.int32) if small else values


@dataclass
class Instances:
    """Every collective instance (dense ids), with its arrivals, built without a sort."""

    number: Numbering
    first: np.ndarray
    last: np.ndarray
    ready: np.ndarray
    complete: np.ndarray
    triple: np.ndarray

    def ids(self, part: MatchPart) -> np.ndarray:
        if not part.pair.size:
            return part.k.astype(np.int64)
        return self.number.ids(part.pairs, np.zeros(part.pairs.size, np.int64))[part.pair] + part.k


def _instances(parts: tuple[MatchPart, ...]) -> Instances:
    calls_on: dict[int, int] = {}
    for part in parts:  # k counts calls per group: its instances = most calls of a member
        if not part.pair.size:
            continue
        calls = np.bincount(part.pair, minlength=part.pairs.size)
        for value, n in zip(part.pairs.tolist(), calls.tolist(), strict=True):
            calls_on[value] = max(calls_on.get(value, 0), n)
    number = numbering(calls_on)
    total = number.total
    first = np.full(total, np.iinfo(np.int64).max, np.int64)
    last = np.full(total, np.iinfo(np.int64).min, np.int64)
    ready = np.full(total, np.iinfo(np.int64).min, np.int64)
    size = np.zeros(total, np.int32)
    triple = np.zeros(total, np.int32)
    inst = Instances(number, first, last, ready, np.zeros(0, bool), triple)
    ids_of: list[np.ndarray] = []
    for part in parts:  # ids are unique within a rank: plain fancy indexing is safe
        ids = inst.ids(part)
        ids_of.append(ids)
        first[ids] = np.minimum(first[ids], part.t_issue)
        last[ids] = np.maximum(last[ids], part.t_issue)
        ready[ids] = np.maximum(ready[ids], part.t_issue + part.queued)
        size[ids] = part.size
        triple[ids] = part.triple
    seen, agrees = agreement(ids_of, [p.op for p in parts], total)
    inst.complete = (seen == size) & (seen > 0) & agrees
    return inst


@dataclass(frozen=True)
class Split:
    """One rank's matched calls, their latency split into queued, waiting and transfer (ns).

    ``clamped``: calls whose peers' readiness (on rank 0's clock) came after the
    call's own end, i.e. the cross-rank clock skew exceeded the measurement: their
    wait is cut to the service time and their transfer is 0.
    """

    ids: np.ndarray
    ok: np.ndarray  # which of the part's calls are in complete instances
    queue: np.ndarray
    wait: np.ndarray
    transfer: np.ndarray
    clamped: np.ndarray


def split(part: MatchPart, inst: Instances) -> Split:
    """The latency split of ``part``'s calls in complete instances."""
    ids = inst.ids(part)
    ok = inst.complete[ids]
    ids, issue = ids[ok], part.t_issue[ok]
    queued, latency = part.queued[ok].astype(np.int64), part.latency[ok].astype(np.int64)
    own = latency - queued if part.service is None else part.service[ok].astype(np.int64)
    queue, wait, transfer, clamped = latency_split(latency, own, inst.ready[ids] - (issue + queued))
    return Split(ids, ok, queue, wait, transfer, clamped)


@dataclass(frozen=True)
class Matched:
    """Aggregates of the matched events (complete instances only).

    ``per_triple`` holds, per (op, group, role): ``time_s`` (latency), ``queue_s``,
    ``wait_s``, ``transfer_s`` (which add up to it), ``clamped`` (calls whose wait
    was cut, see :class:`Split`), and ``bw_bytes``/``bw_s``: bytes and transfer time
    of the calls after each rank's first of that op on that group (the first call is
    left out when there are more: it carries connection set-up).
    """

    parts: tuple[MatchPart, ...]
    inst: Instances
    triples: tuple[Triple, ...]
    """(op, pg_name, role) of each triple code."""
    per_triple: dict[str, np.ndarray]
    per_rank: dict[str, np.ndarray]
    per_step: dict[str, np.ndarray]

    @property
    def clamped(self) -> int:
        """Calls whose wait for peers was cut because clock skew exceeded their latency."""
        return int(self.per_triple["clamped"].sum())


def _not_first(part: MatchPart) -> np.ndarray:
    """Calls other than a rank's first of their (group, op), where it made more than one."""
    if not part.pair.size:
        return np.zeros(0, bool)
    kinds, kind = dense_codes(part.pair.astype(np.int64) * 4096 + part.op)
    calls = np.bincount(kind, minlength=kinds.size)[kind]
    return (kth(kind, kinds.size) > 0) | (calls == 1)


def match_calls(
    parts: tuple[MatchPart, ...], triples: tuple[Triple, ...], steps: StepRange | None = None
) -> tuple[Matched, Matched | None]:
    """Match every rank's collective calls into instances and sum them up; with
    ``steps``, also the sums over the instances whose members' calls all lie in those
    steps (the instances stay as matched over the whole run)."""
    inst = _instances(parts)
    inside = _inside(parts, inst, steps) if steps is not None else None
    n_rank = max((p.rank for p in parts), default=-1) + 1
    n_step = max((int(p.step.max()) + 1 for p in parts if p.step.size), default=0)
    return summed(parts, inst, triples, (n_rank, n_step), steps, inside, keep=parts)


def summed(
    parts: Iterable[MatchPart],
    inst: Instances,
    triples: tuple[Triple, ...],
    shape: tuple[int, int],
    steps: StepRange | None = None,
    inside: np.ndarray | None = None,
    *,
    keep: tuple[MatchPart, ...] = (),
) -> tuple[Matched, Matched | None]:
    """The sums of the matched ``parts`` (each rank's, ranks in order: they may be made
    one at a time and let go) over ``shape`` = (ranks, steps); with ``steps`` and
    ``inside`` (which instances lie in those steps), those of the instances inside too.
    The :class:`Matched` values hold ``keep`` as their parts."""
    n_rank, n_step = shape
    sums = _Sums.zeros(len(triples), n_rank, n_step)
    outside = _Sums.zeros(len(triples), n_rank, n_step) if inside is not None else None
    for part in parts:
        calls = _calls(part, inst)
        sums.add(part.rank, calls)
        if outside is not None and inside is not None:  # usually few: set-up, warm-up, tail
            out = ~inside[calls.ids]
            if out.any():
                outside.add(part.rank, calls.where(out), per_step=False)
    whole = Matched(keep, inst, triples, sums.per_triple, sums.per_rank, sums.per_step)
    if outside is None or inside is None or steps is None:
        return whole, None
    inner = replace(inst, complete=inst.complete & inside)
    step = np.arange(n_step)  # per step: the whole run's rows of the steps inside
    keep_step = (step >= (steps[0] or 0)) & (step < (steps[1] if steps[1] is not None else n_step))
    per_step = {k: np.where(keep_step, v, 0.0) for k, v in sums.per_step.items()}
    # every sum is of non-negative terms: the difference is clipped at 0 against rounding
    per_triple = {k: np.maximum(v - outside.per_triple[k], 0.0) for k, v in sums.per_triple.items()}
    per_rank = {k: np.maximum(v - outside.per_rank[k], 0.0) for k, v in sums.per_rank.items()}
    return whole, Matched(keep, inner, triples, per_triple, per_rank, per_step)


def _inside(parts: tuple[MatchPart, ...], inst: Instances, steps: StepRange) -> np.ndarray:
    """Which instances have every member's call in steps ``[first, stop)``."""
    inside = np.ones(inst.first.size, bool)
    first, stop = steps
    for part in parts:
        out = np.zeros(part.step.size, bool)
        if first is not None:
            out |= part.step < first
        if stop is not None:
            out |= part.step >= stop
        inside[inst.ids(part)[out]] = False
    return inside


@dataclass(frozen=True)
class _Calls:
    """One rank's calls in complete instances, with what the sums need of each."""

    ids: np.ndarray
    triple: np.ndarray
    step: np.ndarray
    issue: np.ndarray
    end: np.ndarray
    first: np.ndarray
    last: np.ndarray
    queue: np.ndarray
    wait: np.ndarray
    transfer: np.ndarray
    clamped: np.ndarray
    bw: np.ndarray  # counted for bandwidth (not a rank's first call of its group and op)
    nbytes: np.ndarray

    def where(self, mask: np.ndarray) -> _Calls:
        return _Calls(*(getattr(self, f.name)[mask] for f in fields(self)))


def _calls(part: MatchPart, inst: Instances) -> _Calls:
    sp = split(part, inst)
    ok = sp.ok
    return _Calls(
        ids=sp.ids,
        triple=part.triple[ok],
        step=part.step[ok],
        issue=part.t_issue[ok],
        end=part.t_issue[ok] + part.latency[ok],
        first=inst.first[sp.ids],
        last=inst.last[sp.ids],
        queue=sp.queue,
        wait=sp.wait,
        transfer=sp.transfer,
        clamped=sp.clamped,
        bw=_not_first(part)[ok],
        nbytes=part.nbytes[ok],
    )


@dataclass(frozen=True)
class _Sums:
    per_triple: dict[str, np.ndarray]
    per_rank: dict[str, np.ndarray]
    per_step: dict[str, np.ndarray]

    @staticmethod
    def zeros(n_tri: int, n_rank: int, n_step: int) -> _Sums:
        triple = ("time_s", "queue_s", "wait_s", "transfer_s", "clamped", "bw_bytes", "bw_s")
        rank = ("instances", "last_count", "blame_s", "late_s", "wait_s", "transfer_s")
        step = ("wait_s", "transfer_s", "max_skew_s", "seen")
        return _Sums(
            {k: np.zeros(n_tri) for k in triple},
            {k: np.zeros(n_rank) for k in rank},
            {k: np.zeros(n_step) for k in step},
        )

    def add(self, r: int, c: _Calls, *, per_step: bool = True) -> None:
        pt, pr, ps = self.per_triple, self.per_rank, self.per_step
        n_tri, n_step = pt["time_s"].size, ps["seen"].size
        tri = c.triple
        wait, transfer, skew = c.wait / 1e9, c.transfer / 1e9, (c.last - c.first) / 1e9
        pt["time_s"] += np.bincount(tri, (c.end - c.issue) / 1e9, n_tri)
        pt["queue_s"] += np.bincount(tri, c.queue / 1e9, n_tri)
        pt["wait_s"] += np.bincount(tri, wait, n_tri)
        pt["transfer_s"] += np.bincount(tri, transfer, n_tri)
        pt["clamped"] += np.bincount(tri, c.clamped, n_tri)
        pt["bw_bytes"] += np.bincount(tri[c.bw], c.nbytes[c.bw], n_tri)
        pt["bw_s"] += np.bincount(tri[c.bw], transfer[c.bw], n_tri)
        at_last = c.issue == c.last
        pr["instances"][r] += c.ids.size
        pr["last_count"][r] += np.count_nonzero(at_last & (c.last > c.first))
        pr["blame_s"][r] += skew[at_last].sum()
        pr["late_s"][r] += ((c.issue - c.first) / 1e9).sum()
        pr["wait_s"][r] += wait.sum()
        pr["transfer_s"][r] += transfer.sum()
        if not per_step:
            return
        stepped = c.step >= 0  # the set-up window (step -1) is no step: not in per_step
        in_step = c.step[stepped]
        ps["wait_s"] += np.bincount(in_step, wait[stepped], n_step)
        ps["transfer_s"] += np.bincount(in_step, transfer[stepped], n_step)
        ps["seen"] += np.bincount(in_step, minlength=n_step)
        np.maximum.at(ps["max_skew_s"], in_step, skew[stepped])
