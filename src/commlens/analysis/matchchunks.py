"""The rank pass's cross-rank matching a chunk of steps at a time (a run larger than a chunk).

:func:`commlens.analysis.matching.match_calls` holds every rank's calls at
once (about 50 bytes a collective call of the run). Here each rank's calls
are written to disk by chunk of steps as the rank is read (:func:`spill_calls`,
:mod:`commlens.analysis.spill`), with the few facts the numbering needs (its
calls per group, its (op, group, role) triples); then :func:`match_spilled`
takes the chunks one at a time, every rank's calls of a chunk, and fills each
instance's first and last arrival, readiness, completeness and triple (the
instances' arrays: about 30 bytes an instance), and at last sums each rank's
calls, read back a rank at a time, exactly as :func:`match_calls` does (the
same sums in the same order: the same numbers to the last bit). A run whose
instances do not keep to their chunk (one found in two) is matched whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commlens.analysis.codes import dense_codes
from commlens.analysis.matched.match import kth, numbering
from commlens.analysis.matching import (
    Instances,
    Matched,
    MatchPart,
    Triple,
    compact,
    match_calls,
    summed,
)
from commlens.analysis.spill import Index, Spill, chunk_of, chunks, read_chunk, read_rank

if TYPE_CHECKING:
    from commlens.trace.reader import StepRange

CALL = np.dtype(
    [("rank", "i4"), ("op", "i4"), ("pg", "i4"), ("role", "i4"), ("k", "i4"), ("step", "i4"),
     ("size", "i4"), ("pos", "i4"), ("seq", "i8"), ("t_issue", "i8"), ("queued", "i8"),
     ("latency", "i8"), ("nbytes", "i8"), ("service", "i8")]
)  # fmt: skip
"""A spilled collective call (op, group and role in its worker's codes)."""
TRIPLE = 4096
"""(op, group, role) of a call as one number, ``(group·TRIPLE + op)·TRIPLE + role``."""


@dataclass
class CallSpill:
    """One worker's spilled calls: where they are, and per rank its calls per group and its
    triples (in the worker's codes)."""

    spill: Spill
    per_group: dict[int, dict[int, int]] = field(default_factory=dict)
    triples: dict[int, np.ndarray] = field(default_factory=dict)
    steps: int = 0
    """One more than the largest step of a call."""

    @staticmethod
    def open(folder: Path, first_rank: int) -> CallSpill:
        return CallSpill(Spill(folder, f"calls{first_rank}", CALL))


def spill_calls(to: CallSpill, rank: int, calls: dict[str, np.ndarray], width: int) -> None:
    """Write ``rank``'s collective ``calls`` (the rank pass's arrays, in issue order) by
    chunk of ``width`` steps."""
    pg = calls["pg"].astype(np.int64)
    groups, pair = dense_codes(pg)
    rec = np.empty(pg.size, CALL)
    rec["rank"] = rank
    for name in ("op", "pg", "role", "step", "size", "seq", "t_issue", "queued", "latency"):
        rec[name] = calls[name]
    rec["nbytes"] = calls["nbytes"]
    rec["service"] = calls.get("service", 0)
    rec["k"] = kth(pair.astype(np.int32), groups.size)
    rec["pos"] = np.arange(pg.size)
    counts = np.bincount(pair, minlength=groups.size)
    to.per_group[rank] = dict(zip(groups.tolist(), counts.tolist(), strict=True))
    combo = (pg * TRIPLE + calls["op"]) * TRIPLE + calls["role"]
    to.triples[rank] = np.unique(combo)
    if pg.size:
        to.steps = max(to.steps, int(calls["step"].max()) + 1)
    to.spill.add(rank, chunk_of(calls["step"], width), rec)


@dataclass(frozen=True)
class Coded:
    """A worker's spilled calls and its codes made the run's: ``to_run[k][code]``."""

    calls: CallSpill
    to_run: dict[str, np.ndarray]


def match_spilled(
    spilled: list[Coded],
    triples: tuple[Triple, ...],
    triple_codes: np.ndarray,
    steps: StepRange | None,
    service: bool,
) -> tuple[Matched, Matched | None]:
    """:func:`match_calls` of the spilled calls (``triple_codes``: the run's combos, each
    at its triple code's place; ``service``: the calls carry their service time)."""
    index: Index = {}
    for s in spilled:
        index.update(s.calls.spill.index)
    worker = {rank: i for i, s in enumerate(spilled) for rank in s.calls.per_group}
    calls_on: dict[int, int] = {}
    for s in spilled:
        for counts in s.calls.per_group.values():
            for g, n in counts.items():
                run = int(s.to_run["pg_name"][g])
                calls_on[run] = max(calls_on.get(run, 0), n)
    number = numbering(calls_on)
    total = number.total
    inst = Instances(
        number,
        np.full(total, np.iinfo(np.int64).max, np.int64),
        np.full(total, np.iinfo(np.int64).min, np.int64),
        np.full(total, np.iinfo(np.int64).min, np.int64),
        np.zeros(total, bool),
        np.zeros(total, np.int32),
    )
    inside = np.ones(total, bool) if steps is not None else None
    lookup = np.argsort(triple_codes, kind="stable")
    coded = _Recoder(spilled, worker, triple_codes[lookup], lookup.astype(np.int32))
    for chunk in chunks(index):
        rec = coded(read_chunk(index, chunk, CALL))
        if not _fill(inst, rec, coded.triple(rec), inside, steps):
            return _whole(index, coded, triples, steps, service)
    n_step = max((s.calls.steps for s in spilled), default=0)
    ranks = sorted(r for s in spilled for r in s.calls.per_group)
    parts = (_part(coded, index, rank, service) for rank in ranks)
    return summed(parts, inst, triples, (max(ranks, default=-1) + 1, n_step), steps, inside)


@dataclass(frozen=True)
class _Recoder:
    """Turns spilled records' worker codes into the run's, and gives their triple codes."""

    spilled: list[Coded]
    worker: dict[int, int]
    combos: np.ndarray
    """The run's combos, sorted."""
    codes: np.ndarray
    """The triple code of each of :attr:`combos`."""

    def __call__(self, rec: np.ndarray) -> np.ndarray:
        if not rec.size:
            return rec
        ranks, first = np.unique(rec["rank"], return_index=True)  # ranks in order
        by = np.array([self.worker[r] for r in ranks.tolist()])
        of = np.repeat(by, np.diff(np.r_[first, rec.size]))
        for w in np.unique(of).tolist():
            sel = of == w
            for name, key in (("op", "op"), ("pg", "pg_name"), ("role", "role")):
                rec[name][sel] = self.spilled[w].to_run[key][rec[name][sel]]
        return rec

    def triple(self, rec: np.ndarray) -> np.ndarray:
        combo = (rec["pg"].astype(np.int64) * TRIPLE + rec["op"]) * TRIPLE + rec["role"]
        return self.codes[np.searchsorted(self.combos, combo)]


def _fill(
    inst: Instances,
    rec: np.ndarray,
    triple: np.ndarray,
    inside: np.ndarray | None,
    steps: StepRange | None,
) -> bool:
    """Fill the instances of one chunk's calls (every rank's, ranks in order) as
    :func:`commlens.analysis.matching._instances` does; False where one of them was met
    in an earlier chunk already (the run is to be matched whole)."""
    if not rec.size:
        return True
    ids = inst.number.ids(rec["pg"].astype(np.int64), rec["k"].astype(np.int64))
    uniq, loc = np.unique(ids, return_inverse=True)
    if (inst.first[uniq] != np.iinfo(np.int64).max).any():
        return False
    n = uniq.size
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    last = np.full(n, np.iinfo(np.int64).min, np.int64)
    ready = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, loc, rec["t_issue"])
    np.maximum.at(last, loc, rec["t_issue"])
    np.maximum.at(ready, loc, rec["t_issue"] + rec["queued"])
    at_last = loc.size - 1 - np.unique(loc[::-1], return_index=True)[1]  # the last rank's call
    op = rec["op"]
    agrees = np.ones(n, bool)
    agrees[loc[op != op[at_last][loc]]] = False
    seen = np.bincount(loc, minlength=n)
    inst.first[uniq], inst.last[uniq], inst.ready[uniq] = first, last, ready
    inst.complete[uniq] = (seen == rec["size"][at_last]) & (seen > 0) & agrees
    inst.triple[uniq] = triple[at_last]
    if inside is not None and steps is not None:
        step = rec["step"]
        out = np.zeros(step.size, bool)
        if steps[0] is not None:
            out |= step < steps[0]
        if steps[1] is not None:
            out |= step >= steps[1]
        inside[ids[out]] = False
    return True


def _part(coded: _Recoder, index: Index, rank: int, service: bool) -> MatchPart:
    """``rank``'s calls of every chunk, in its issue order, as a :class:`MatchPart`."""
    rec = coded(read_rank(index, rank, CALL))
    pos = rec["pos"]
    if pos.size > 1 and (pos[1:] < pos[:-1]).any():
        rec = rec[np.argsort(pos, kind="stable")]
    pairs, pair = dense_codes(rec["pg"].astype(np.int64))
    return MatchPart(
        rank=rank,
        pairs=pairs,
        pair=pair.astype(np.int32),
        k=rec["k"].copy(),
        op=rec["op"].copy(),
        triple=coded.triple(rec).astype(np.int32),
        seq=compact(rec["seq"]),
        step=rec["step"].copy(),
        size=rec["size"].copy(),
        t_issue=rec["t_issue"].copy(),
        queued=compact(rec["queued"]),
        latency=compact(rec["latency"]),
        nbytes=compact(rec["nbytes"]),
        service=compact(rec["service"]) if service else None,
    )


def _whole(
    index: Index,
    coded: _Recoder,
    triples: tuple[Triple, ...],
    steps: StepRange | None,
    service: bool,
) -> tuple[Matched, Matched | None]:
    """Every rank's spilled calls matched at once (an instance across chunks)."""
    ranks = sorted(r for s in coded.spilled for r in s.calls.per_group)
    return match_calls(tuple(_part(coded, index, rank, service) for rank in ranks), triples, steps)
