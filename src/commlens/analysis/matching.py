"""Collectives matched across the ranks of their group, in numpy.

A collective instance is the k-th call of an op on a group (``pg_name``,
``op``, k) in each rank, in sequence order. :func:`match_calls` gives each
instance a dense id (offset of its (group, op) pair + k) and gathers the
arrivals by scattering each rank's calls onto those ids, without sorting all
events; then it sums wait and transfer per (op, group, role), per rank and
per step (see :mod:`commlens.analysis.skew` for what they mean).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    t_end: np.ndarray


@dataclass
class Instances:
    """Every collective instance (dense ids), with its arrivals, built without a sort."""

    offset: dict[int, int]  # (group, op) code -> id of its first instance
    first: np.ndarray
    last: np.ndarray
    complete: np.ndarray
    triple: np.ndarray

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
    seen = np.zeros(total, np.int64)
    size = np.zeros(total, np.int64)
    triple = np.zeros(total, np.int32)
    inst = Instances(offset, first, last, seen, triple)
    for part in parts:  # ids are unique within a rank: plain fancy indexing is safe
        ids = inst.ids(part)
        first[ids] = np.minimum(first[ids], part.t_issue)
        last[ids] = np.maximum(last[ids], part.t_issue)
        seen[ids] += 1
        size[ids] = part.size
        triple[ids] = part.triple
    inst.complete = (seen == size) & (seen > 0)
    return inst


@dataclass(frozen=True)
class Matched:
    """Aggregates of the matched events (complete instances only)."""

    parts: tuple[MatchPart, ...]
    inst: Instances
    triples: tuple[Triple, ...]
    """(op, pg_name, role) of each triple code."""
    per_triple: dict[str, np.ndarray]
    per_rank: dict[str, np.ndarray]
    per_step: dict[str, np.ndarray]


def match_calls(parts: tuple[MatchPart, ...], triples: tuple[Triple, ...]) -> Matched:
    """Match every rank's collective calls into instances and sum them up."""
    inst = _instances(parts)
    n_tri = len(triples)
    n_rank = max((p.rank for p in parts), default=-1) + 1
    n_step = max((int(p.step.max()) + 1 for p in parts if p.step.size), default=0)
    per_triple = {k: np.zeros(n_tri) for k in ("time_s", "wait_s", "transfer_s")}
    per_rank = {
        k: np.zeros(n_rank)
        for k in ("instances", "last_count", "blame_s", "late_s", "wait_s", "transfer_s")
    }
    per_step = {k: np.zeros(n_step) for k in ("wait_s", "transfer_s", "max_skew_s")}
    per_step["seen"] = np.zeros(n_step)
    for part in parts:
        ids = inst.ids(part)
        ok = inst.complete[ids]
        ids, issue, end = ids[ok], part.t_issue[ok], part.t_end[ok]
        first, last = inst.first[ids], inst.last[ids]
        tri, step, r = part.triple[ok], np.maximum(part.step[ok], 0), part.rank
        wait, transfer, skew = (last - issue) / 1e9, (end - last) / 1e9, (last - first) / 1e9
        per_triple["time_s"] += np.bincount(tri, (end - issue) / 1e9, n_tri)
        per_triple["wait_s"] += np.bincount(tri, wait, n_tri)
        per_triple["transfer_s"] += np.bincount(tri, transfer, n_tri)
        at_last = issue == last
        per_rank["instances"][r] += ids.size
        per_rank["last_count"][r] += np.count_nonzero(at_last & (last > first))
        per_rank["blame_s"][r] += skew[at_last].sum()
        per_rank["late_s"][r] += ((issue - first) / 1e9).sum()
        per_rank["wait_s"][r] += wait.sum()
        per_rank["transfer_s"][r] += transfer.sum()
        per_step["wait_s"] += np.bincount(step, wait, n_step)
        per_step["transfer_s"] += np.bincount(step, transfer, n_step)
        per_step["seen"] += np.bincount(step, minlength=n_step)
        np.maximum.at(per_step["max_skew_s"], step, skew)
    return Matched(parts, inst, triples, per_triple, per_rank, per_step)
