"""Collectives matched across the ranks of their group, in numpy.

A collective instance is the k-th call of an op on a group (``pg_name``,
``op``, k) in each rank, in sequence order. :func:`match_calls` gives each
instance a dense id (offset of its (group, op) pair + k) and gathers the
arrivals by scattering each rank's calls onto those ids, without sorting all
events; then it sums wait and transfer per (op, group, role), per rank and
per step (see :mod:`commlens.analysis.skew` for what they mean).

Each instance also keeps ``ready``: the latest service start over its members
(when the last member's op reached the head of its group's queue). A member's
time waiting for peers is ``ready − own service start``, clamped to
``[0, own service time]``; its transfer is the rest of its service time, so
queued + waiting + transfer = its latency, each never negative.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from commlens.analysis.codes import dense_codes

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class MatchPart:
    """One rank's collective calls that can be matched across ranks."""

    rank: int
    pair: np.ndarray  # global (group, op) code
    k: np.ndarray  # 0-based: the k-th call of that op on that group in this rank
    triple: np.ndarray  # global (op, group, role) code
    seq: np.ndarray
    step: np.ndarray
    size: np.ndarray  # group size
    t_issue: np.ndarray
    t_start: np.ndarray  # service start on the group's queue (see rankpass)
    t_end: np.ndarray
    nbytes: np.ndarray  # size_bytes of each call


@dataclass
class Instances:
    """Every collective instance (dense ids), with its arrivals, built without a sort."""

    offset: dict[int, int]  # (group, op) code -> id of its first instance
    first: np.ndarray
    last: np.ndarray
    ready: np.ndarray
    complete: np.ndarray
    triple: np.ndarray
    step_lo: np.ndarray  # lowest and highest step of its members' calls
    step_hi: np.ndarray

    def ids(self, part: MatchPart) -> np.ndarray:
        if not part.pair.size:
            return part.k
        pairs, inverse = dense_codes(part.pair)
        starts = np.array([self.offset[int(p)] for p in pairs.tolist()], np.int64)
        return starts[inverse] + part.k


def _instances(parts: tuple[MatchPart, ...]) -> Instances:
    count_per_pair: dict[int, int] = {}
    for part in parts:  # k counts calls per pair: the instances of a pair = most calls
        if not part.pair.size:
            continue
        pairs, inverse = dense_codes(part.pair)
        for value, n in zip(pairs.tolist(), np.bincount(inverse).tolist(), strict=True):
            count_per_pair[value] = max(count_per_pair.get(value, 0), n)
    offset, total = {}, 0
    for value in sorted(count_per_pair):
        offset[value] = total
        total += count_per_pair[value]
    first = np.full(total, np.iinfo(np.int64).max, np.int64)
    last = np.full(total, np.iinfo(np.int64).min, np.int64)
    ready = np.full(total, np.iinfo(np.int64).min, np.int64)
    seen = np.zeros(total, np.int64)
    size = np.zeros(total, np.int64)
    triple = np.zeros(total, np.int32)
    step_lo = np.full(total, np.iinfo(np.int32).max, np.int32)
    step_hi = np.full(total, np.iinfo(np.int32).min, np.int32)
    inst = Instances(offset, first, last, ready, seen, triple, step_lo, step_hi)
    for part in parts:  # ids are unique within a rank: plain fancy indexing is safe
        ids = inst.ids(part)
        first[ids] = np.minimum(first[ids], part.t_issue)
        last[ids] = np.maximum(last[ids], part.t_issue)
        ready[ids] = np.maximum(ready[ids], part.t_start)
        seen[ids] += 1
        size[ids] = part.size
        triple[ids] = part.triple
        step_lo[ids] = np.minimum(step_lo[ids], part.step)
        step_hi[ids] = np.maximum(step_hi[ids], part.step)
    inst.complete = (seen == size) & (seen > 0)
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
    ids, issue, start, end = ids[ok], part.t_issue[ok], part.t_start[ok], part.t_end[ok]
    service = np.maximum(end - start, 0)
    raw = inst.ready[ids] - start
    wait = np.clip(raw, 0, service)
    return Split(ids, ok, start - issue, wait, service - wait, raw > service)


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

    def within(self, first: int | None, stop: int | None) -> Matched:
        """The same matching summed over the instances whose members' calls all lie in
        steps ``[first, stop)`` (None: unbounded); instances stay as matched over the run."""
        inst = self.inst
        keep = inst.complete.copy()
        if first is not None:
            keep &= inst.step_lo >= first
        if stop is not None:
            keep &= inst.step_hi < stop
        return _summed(self.parts, replace(inst, complete=keep), self.triples)


def _not_first(part: MatchPart) -> np.ndarray:
    """Calls other than a rank's first of their (group, op), where it made more than one."""
    if not part.pair.size:
        return np.zeros(0, bool)
    _, inverse = dense_codes(part.pair)
    calls = np.bincount(inverse)[inverse]
    return (part.k > 0) | (calls == 1)


def match_calls(parts: tuple[MatchPart, ...], triples: tuple[Triple, ...]) -> Matched:
    """Match every rank's collective calls into instances and sum them up."""
    return _summed(parts, _instances(parts), triples)


def _summed(parts: tuple[MatchPart, ...], inst: Instances, triples: tuple[Triple, ...]) -> Matched:
    """The sums over ``parts``' calls in ``inst``'s complete instances."""
    n_tri = len(triples)
    n_rank = max((p.rank for p in parts), default=-1) + 1
    n_step = max((int(p.step.max()) + 1 for p in parts if p.step.size), default=0)
    per_triple = {
        k: np.zeros(n_tri)
        for k in ("time_s", "queue_s", "wait_s", "transfer_s", "clamped", "bw_bytes", "bw_s")
    }
    per_rank = {
        k: np.zeros(n_rank)
        for k in ("instances", "last_count", "blame_s", "late_s", "wait_s", "transfer_s")
    }
    per_step = {k: np.zeros(n_step) for k in ("wait_s", "transfer_s", "max_skew_s")}
    per_step["seen"] = np.zeros(n_step)
    for part in parts:
        sp = split(part, inst)
        ids, ok = sp.ids, sp.ok
        issue, end = part.t_issue[ok], part.t_end[ok]
        first, last = inst.first[ids], inst.last[ids]
        tri, step, r = part.triple[ok], part.step[ok], part.rank
        stepped = step >= 0  # the set-up window (step -1) is no step: not in per_step
        wait, transfer, skew = sp.wait / 1e9, sp.transfer / 1e9, (last - first) / 1e9
        bw = _not_first(part)[ok]
        per_triple["time_s"] += np.bincount(tri, (end - issue) / 1e9, n_tri)
        per_triple["queue_s"] += np.bincount(tri, sp.queue / 1e9, n_tri)
        per_triple["wait_s"] += np.bincount(tri, wait, n_tri)
        per_triple["transfer_s"] += np.bincount(tri, transfer, n_tri)
        per_triple["clamped"] += np.bincount(tri, sp.clamped, n_tri)
        per_triple["bw_bytes"] += np.bincount(tri[bw], part.nbytes[ok][bw], n_tri)
        per_triple["bw_s"] += np.bincount(tri[bw], transfer[bw], n_tri)
        at_last = issue == last
        per_rank["instances"][r] += ids.size
        per_rank["last_count"][r] += np.count_nonzero(at_last & (last > first))
        per_rank["blame_s"][r] += skew[at_last].sum()
        per_rank["late_s"][r] += ((issue - first) / 1e9).sum()
        per_rank["wait_s"][r] += wait.sum()
        per_rank["transfer_s"][r] += transfer.sum()
        in_step = step[stepped]
        per_step["wait_s"] += np.bincount(in_step, wait[stepped], n_step)
        per_step["transfer_s"] += np.bincount(in_step, transfer[stepped], n_step)
        per_step["seen"] += np.bincount(in_step, minlength=n_step)
        np.maximum.at(per_step["max_skew_s"], in_step, skew[stepped])
    return Matched(parts, inst, triples, per_triple, per_rank, per_step)
