"""What a traced job's own communication implies, held against what it issued.

For a run without a model (made by ``commlens trace`` or ``commlens.capture``
around any script) the expectations come from the events themselves, over
the job's steps after the first (set-up, warm-up and the tail after the last
step left out):

- every collective matched across its group (the k-th call of an op on a
  group on each member) has the same ``size_bytes`` on every member;
- data-parallel gradient all-reduces (``all_reduce`` issued in backward on a
  ``dp`` group or a group without a role): every synced step (a step with
  any) all-reduces the same bytes in the same number of calls, on every rank
  of the group — the sum of the bucket sizes, once per step;
- sharded data parallel (FSDP, ZeRO): each group's ``reduce_scatter`` and
  ``all_gather`` bytes per step, issued by the model's forward, backward or
  optimizer step, are the same on every step and rank;
- the gradients of what the job wrapped (the manifest's ``wrapped``, noted
  by the capture when DDP, FSDP2 or a DeepSpeed engine was built): each
  synced step reduces, over the wrapper's group in backward (all-reduce or
  reduce-scatter), the wrapped parameters' gradient elements (a whole
  number of times: ZeRO-2 reduces each micro-batch's), in as many bytes as
  those elements take in the dtype reduced;
- point-to-point: over the whole run, what each rank sends to a peer that
  peer receives from it, in as many calls and bytes.

A job's own metric traffic (a logged loss all-reduced, a logging gather, a
token count, ``sync_dist`` metrics: ops outside the model's backward, or
outside its forward, backward and optimizer step for the sharded checks)
is held only by the same-size check: its volume may vary from step to step.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from commlens.analysis.parallel import detach, in_worker, map_chunks
from commlens.errors import UsageError
from commlens.optable import P2P_OPS, RECEIVER
from commlens.trace.reader import RankDamaged, RunView

_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}  # fmt: skip
_FLOATS = {"float64", "float32", "float16", "bfloat16"}
MODEL_PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class Expectation:
    """One expectation about one group: formed or not, held or not, and why."""

    name: str
    pg_name: str
    role: str
    formed: bool
    ok: bool
    detail: str


@dataclass
class TracedValidation:
    """The verdict on a traced run: its expectations and what they covered."""

    steps: list[int]
    ranks: list[int]
    expectations: list[Expectation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        formed = [e for e in self.expectations if e.formed]
        return bool(formed) and all(e.ok for e in formed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "traced": True,
            "steps": self.steps,
            "ranks": self.ranks,
            "expectations": [e.__dict__ for e in self.expectations],
            "notes": self.notes,
        }


ROW_COLUMNS = ["rank", "seq", "step", "op", "pg_name", "role", "phase", "size_bytes",
               "group_size", "count", "dtype", "peer", "pg_ranks"]  # fmt: skip
"""The event columns the expectations read."""


def _rows(events: pa.Table) -> list[dict[str, Any]]:
    return events.select([c for c in ROW_COLUMNS if c in events.schema.names]).to_pylist()


def held_steps(events: pa.Table, windows: list[int]) -> list[int]:
    """The job's steps after its first (set-up, step −1, left out too): the recorded
    step windows, else the event steps."""
    return held_of(windows, {int(s) for s in events.column("step").to_pylist()})


def held_of(windows: list[int], event_steps: set[int]) -> list[int]:
    """:func:`held_steps` from the windows' steps and the events' steps."""
    steps = sorted(set(windows)) or sorted(event_steps)
    steps = [s for s in steps if s >= 0]  # step -1: the set-up window
    return steps[1:] if len(steps) > 1 else steps


class _Sizes:
    """Each member's sizes of the k-th call of an op on a group, added rank by rank
    (8 bytes a call)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], dict[int, array[int]]] = defaultdict(dict)
        self.roles: dict[str, str] = {}
        self.sizes: dict[str, int] = {}

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Rows of one rank (any order; taken in seq order)."""
        for r in sorted(rows, key=lambda r: (r["rank"], r["seq"])):
            if r["op"] in P2P_OPS or (r["group_size"] or 1) < 2:
                continue
            per_rank = self.calls[(r["pg_name"], r["op"])]
            per_rank.setdefault(r["rank"], array("q")).append(int(r["size_bytes"] or 0))
            self.roles[r["pg_name"]] = r["role"] or self.roles.get(r["pg_name"], "")
            self.sizes[r["pg_name"]] = int(r["group_size"])

    def held(self) -> list[Expectation]:
        calls, roles, sizes = self.calls, self.roles, self.sizes
        out = []
        for pg in sorted({pg for pg, _ in calls}):
            bad: list[str] = []
            instances = 0
            for (g, op), per_rank in sorted(calls.items()):
                if g != pg:
                    continue
                n = max(len(v) for v in per_rank.values())
                instances += n
                for k in range(n):
                    if bad:
                        break
                    seen = {rank: v[k] for rank, v in per_rank.items() if k < len(v)}
                    if len(set(seen.values())) > 1:
                        bad.append(f"{op} call {k + 1}: sizes {seen}")
            partial = any(len(v) < sizes[pg] for (g, _), v in calls.items() if g == pg)
            detail = bad[0] if bad else f"{instances} collective calls, same size on every member"
            if partial and not bad:
                detail += " (not every member recorded this group)"
            out.append(
                Expectation("same size on every member", pg, roles[pg], True, not bad, detail)
            )
        return out


def _per_step(
    rows: list[dict[str, Any]], steps: set[int], want: str, keep: Any
) -> dict[str, dict[tuple[int, int], tuple[int, int]]]:
    """group -> (rank, step) -> (calls, bytes) of the ``want`` op rows ``keep`` accepts."""
    out: dict[str, dict[tuple[int, int], tuple[int, int]]] = defaultdict(dict)
    for r in rows:
        if r["op"] != want or r["step"] not in steps or not keep(r):
            continue
        key = (int(r["rank"]), int(r["step"]))
        calls, nbytes = out[r["pg_name"]].get(key, (0, 0))
        out[r["pg_name"]][key] = (calls + 1, nbytes + int(r["size_bytes"] or 0))
    return out


def _constant(
    name: str, pg: str, role: str, per: dict[tuple[int, int], tuple[int, int]]
) -> Expectation:
    ranks, steps_seen = {r for r, _ in per}, {s for _, s in per}
    per = {(r, s): per.get((r, s), (0, 0)) for r in ranks for s in steps_seen}
    values = set(per.values())
    if len(values) == 1:
        calls, nbytes = next(iter(values))
        steps = len(steps_seen)
        detail = f"{calls} call(s), {nbytes:,} bytes in each of {steps} step(s) on every rank"
        return Expectation(name, pg, role, True, True, detail)
    (r0, s0), v0 = min(per.items())
    other = next(((k, v) for k, v in sorted(per.items()) if v != v0))
    (r1, s1), v1 = other
    detail = (
        f"rank {r0} step {s0}: {v0[0]} call(s), {v0[1]:,} bytes; "
        f"rank {r1} step {s1}: {v1[0]} call(s), {v1[1]:,} bytes"
    )
    return Expectation(name, pg, role, True, False, detail)


def _gradient_sync(row: dict[str, Any]) -> bool:
    """Gradient traffic: issued in backward on a ``dp`` group or a group without a role
    (not a tensor-parallel one); a metric reduced on the same group is not."""
    return bool(row["phase"] == "backward" and row["role"] in ("dp", "", None))


def _wrapped(manifest: dict[str, Any]) -> Any:
    """What the capture recorded about the wrapped parameters, if anything."""
    if manifest.get("wrapped"):
        return manifest["wrapped"]
    for meta in (manifest.get("ranks") or {}).values():
        inner = meta.get("meta") if isinstance(meta, dict) else None
        if isinstance(inner, dict) and inner.get("wrapped"):
            return inner["wrapped"]
    return None


GRADIENTS = "gradient bytes per synced step = gradients of the wrapped parameters"


Reduced = dict[tuple[int, ...], dict[tuple[int, int], list[int]]]
"""group members -> (rank, step) -> [elements, bytes, bytes the elements take]"""


def _gradient_sums(rows: list[dict[str, Any]], steps: set[int], per: Reduced) -> None:
    """Add the gradient reductions of ``rows`` (held steps) to ``per``."""
    for r in rows:
        if (
            r["op"] in ("all_reduce", "reduce_scatter")
            and r["step"] in steps
            and _gradient_sync(r)
            and str(r["dtype"]) in _FLOATS  # not DDP's used-parameter map (int32)
        ):
            got = per[tuple(r["pg_ranks"] or ())].setdefault(
                (int(r["rank"]), int(r["step"])), [0, 0, 0]
            )
            count = int(r["count"] or 0)
            got[0] += count
            got[1] += int(r["size_bytes"] or 0)
            got[2] += count * _ITEMSIZE.get(str(r["dtype"]), 0)


def _gradients(
    per: Reduced,
    first_ranks: dict[str, tuple[int, ...]],
    wrapped: Any,
    roles: dict[str, str],
    synced: set[str],
) -> list[Expectation]:
    """Each wrapped group's gradient reductions per synced step against its wrapped
    parameters' gradient elements (and their bytes in the dtype reduced);
    ``first_ranks``: each group's members as its events give them."""
    groups = wrapped.get("groups") if isinstance(wrapped, dict) else None
    if not isinstance(groups, dict):
        why = (
            "the manifest records no wrapped parameters"
            if wrapped is None
            else "the manifest's wrapped section is not one this version reads"
        )
        return [Expectation(GRADIENTS, pg, roles.get(pg, ""), False, False, f"not formed: {why}")
                for pg in sorted(synced)]  # fmt: skip
    # A wrapper's group is known by its members: a framework may reduce over a
    # group of the same ranks made apart from the one it names (DeepSpeed ZeRO-3).
    members = {pg: _members(entry, pg, first_ranks) for pg, entry in groups.items()}
    out = []
    for pg in sorted(groups):
        entry = groups[pg]
        want = sum(int(e.get("elements", 0)) for g, e in groups.items()
                   if isinstance(e, dict) and members[g] == members[pg])  # fmt: skip
        by = ", ".join(entry.get("by", [])) if isinstance(entry, dict) else ""
        seen = per.get(members[pg])
        if not seen:
            detail = f"not formed: no gradient reduction on the group {by} wraps in a held step"
            out.append(Expectation(GRADIENTS, pg, roles.get(pg, ""), False, False, detail))
            continue
        bad = [(k, v) for k, v in sorted(seen.items())
               if not want or v[0] % want or not v[0] or v[1] != v[2]]  # fmt: skip
        if bad:
            (rank, step), (elements, nbytes, expected) = bad[0]
            detail = (
                f"rank {rank} step {step}: {elements:,} gradient elements in {nbytes:,} bytes; "
                f"{by} wrapped {want:,} elements, which take {expected:,} bytes as reduced"
            )
        else:
            elements, nbytes, _ = next(iter(seen.values()))
            times = "" if elements == want else f" {elements // want} times (each micro-batch)"
            detail = (
                f"{want:,} gradient elements of {entry.get('params', 0)} parameters ({by})"
                f"{times}, {nbytes:,} bytes, in each of {len({s for _, s in seen})} step(s) "
                "on every rank"
            )
        out.append(Expectation(GRADIENTS, pg, roles.get(pg, ""), True, not bad, detail))
    return out


def _members(entry: Any, pg: str, first_ranks: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The ranks of a wrapped group: as the capture noted them, else as its events say."""
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    if isinstance(ranks, list):
        return tuple(int(r) for r in ranks)
    return first_ranks.get(pg, ())


Traffic = dict[tuple[str, int, int], list[int]]
"""(op, sender, receiver) -> [calls, bytes]"""


def _pair_sums(rows: list[dict[str, Any]], sent: Traffic, got: Traffic, ranks: set[int]) -> None:
    """Add what ``rows`` send and receive (and their ranks) to ``sent``, ``got``, ``ranks``."""
    ranks.update(int(r["rank"]) for r in rows)
    for r in rows:
        op, peer = r["op"], r["peer"]
        if op not in P2P_OPS or peer is None or peer < 0:
            continue
        if op in RECEIVER:
            key, side = (RECEIVER[op], int(r["rank"]), int(peer)), sent
        else:
            key, side = (op, int(peer), int(r["rank"])), got
        side[key][0] += 1
        side[key][1] += int(r["size_bytes"] or 0)


def _pairs(sent: Traffic, got: Traffic, ranks: set[int]) -> list[Expectation]:
    """Point-to-point: what each rank sent each peer, received by it (calls and bytes)."""
    pairs = {k for k in set(sent) | set(got) if k[1] in ranks and k[2] in ranks}
    if not pairs:
        return []
    bad = sorted(k for k in pairs if sent.get(k, [0, 0]) != got.get(k, [0, 0]))
    if bad:
        op, a, b = bad[0]
        s, g = sent.get(bad[0], [0, 0]), got.get(bad[0], [0, 0])
        detail = (
            f"rank {a} sent rank {b} {s[0]} message(s), {s[1]:,} bytes; "
            f"rank {b} received {g[0]} ({op}), {g[1]:,} bytes"
        )
    else:
        calls = sum(sent[k][0] for k in pairs)
        detail = f"{calls} message(s) between {len(pairs)} ordered pair(s), each received as sent"
    return [Expectation("every send received as sent", "", "pp", True, not bad, detail)]


def traced_expectations(
    events: pa.Table, manifest: dict[str, Any], windows: list[int]
) -> TracedValidation:
    """Form and hold the expectations (module docstring) over the events of a traced run."""
    return traced_by_rank([events], manifest, held_steps(events, windows))


_RANKS_A_WORKER = 64
"""The fewest ranks worth a worker process of their own."""


def _no_traffic() -> list[int]:
    return [0, 0]


@dataclass
class _Gathered:
    """What the expectations gather from the events, a table (a rank) at a time; the
    gathered parts of consecutive ranks merge (:meth:`merge`, in rank order) into what
    one pass over all of them gathers."""

    kept: set[int]
    sizes: _Sizes = field(default_factory=_Sizes)
    roles: dict[str, str] = field(default_factory=dict)
    held_ranks: set[int] = field(default_factory=set)
    ddp: dict[str, dict[tuple[int, int], tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    sharded: dict[str, dict[str, dict[tuple[int, int], tuple[int, int]]]] = field(
        default_factory=lambda: {op: defaultdict(dict) for op in ("reduce_scatter", "all_gather")}
    )
    reduced: Reduced = field(default_factory=lambda: defaultdict(dict))
    first_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    sent: Traffic = field(default_factory=lambda: defaultdict(_no_traffic))
    got: Traffic = field(default_factory=lambda: defaultdict(_no_traffic))
    all_ranks: set[int] = field(default_factory=set)
    damaged: list[tuple[int, str]] = field(default_factory=list)
    """Ranks a worker found damaged (rank, reason), for the parent to leave out."""

    def add(self, table: pa.Table) -> None:
        kept = self.kept
        every = _rows(table)
        _pair_sums(every, self.sent, self.got, self.all_ranks)
        rows = [r for r in every if r["step"] in kept]
        del every
        self.held_ranks.update(int(r["rank"]) for r in rows)
        self.roles.update((r["pg_name"], r["role"] or "") for r in rows if r["role"])
        for r in rows:
            self.first_ranks.setdefault(r["pg_name"], tuple(r["pg_ranks"] or ()))
        self.sizes.add(rows)
        for pg, per in _per_step(rows, kept, "all_reduce", _gradient_sync).items():
            self.ddp[pg].update(per)
        for op, into in self.sharded.items():
            for pg, per in _per_step(rows, kept, op, lambda r: r["phase"] in MODEL_PHASES).items():
                into[pg].update(per)
        _gradient_sums(rows, kept, self.reduced)

    def merge(self, later: _Gathered) -> None:
        """Add what ``later`` gathered from the ranks after these."""
        for key, per_rank in later.sizes.calls.items():
            self.sizes.calls[key].update(per_rank)
        for pg, role in later.sizes.roles.items():
            self.sizes.roles[pg] = role or self.sizes.roles.get(pg, "")
        self.sizes.sizes.update(later.sizes.sizes)
        self.roles.update(later.roles)
        self.held_ranks |= later.held_ranks
        for pg, per in later.ddp.items():
            self.ddp[pg].update(per)
        for op, into in self.sharded.items():
            for pg, per in later.sharded[op].items():
                into[pg].update(per)
        for members, by_step in later.reduced.items():
            for rank_step, sums in by_step.items():
                mine = self.reduced[members].setdefault(rank_step, [0, 0, 0])
                for i, value in enumerate(sums):
                    mine[i] += value
        for pg, ranks in later.first_ranks.items():
            self.first_ranks.setdefault(pg, ranks)
        for mine_side, their_side in ((self.sent, later.sent), (self.got, later.got)):
            for k, (calls, nbytes) in their_side.items():
                mine_side[k][0] += calls
                mine_side[k][1] += nbytes
        self.all_ranks |= later.all_ranks
        self.damaged += later.damaged


def traced_by_rank(
    tables: Iterable[pa.Table], manifest: dict[str, Any], steps: list[int]
) -> TracedValidation:
    """:func:`traced_expectations` over the events given a table at a time (each holding
    every event of the ranks in it: a rank at a time keeps memory to one rank's events
    and a few numbers per collective call), held over ``steps`` (:func:`held_of`)."""
    gathered = _Gathered(set(steps))
    for table in tables:
        gathered.add(table)
    return _held(gathered, manifest, steps)


def _held(g: _Gathered, manifest: dict[str, Any], steps: list[int]) -> TracedValidation:
    """The expectations formed and held from what was gathered."""
    result = TracedValidation(steps=steps, ranks=sorted(g.held_ranks))
    result.expectations.extend(g.sizes.held())
    for pg, per in sorted(g.ddp.items()):
        name = "dp all-reduce bytes per synced step constant"
        result.expectations.append(_constant(name, pg, g.roles.get(pg, ""), per))
    for op in ("reduce_scatter", "all_gather"):
        for pg, per in sorted(g.sharded[op].items()):
            name = f"{op} bytes per step constant"
            result.expectations.append(_constant(name, pg, g.roles.get(pg, ""), per))
    result.expectations.extend(
        _gradients(g.reduced, g.first_ranks, _wrapped(manifest), g.roles, set(g.ddp))
    )
    result.expectations.extend(_pairs(g.sent, g.got, g.all_ranks))
    if steps:
        result.notes.append(
            f"held steps {steps[0]}..{steps[-1]}: the job's steps after the first; set-up and "
            "the tail after the last step are left out"
        )
    else:
        result.notes.append("the run has no steps with communication: nothing held")
    return result


def _gather_ranks(view: RunView, kept: set[int], ranks: list[int]) -> _Gathered:
    """What ``ranks`` (one process's share, in order) give; in a worker, a damaged
    rank is noted for the parent to leave out."""
    gathered = _Gathered(kept)
    if in_worker():
        gathered.damaged = detach(view)
    for table in _rank_tables(view, ranks):
        gathered.add(table)
    return gathered


def validate_traced(run: Any) -> TracedValidation:
    """Hold a traced run, loaded (``commlens.load_run``) or a
    :class:`~commlens.trace.reader.RunView` (read a rank at a time, so that memory
    holds one rank's events), against what its own communication implies."""
    if isinstance(run, RunView):
        windows = run.sql("SELECT DISTINCT step FROM steps").column("step").to_pylist()
        found = run.sql("SELECT DISTINCT step FROM events").column("step").to_pylist()
        if not found:
            raise UsageError(f"{run.path}: the run has no communication events to validate")
        steps = held_of([int(s) for s in windows], {int(s) for s in found if s is not None})
        ranks = run.ranks
        # workers read rank files (or parts); a rank served by SQL only is read here
        least = _RANKS_A_WORKER if all(r in run.sources for r in ranks) else len(ranks) + 1
        parts = map_chunks(partial(_gather_ranks, run, set(steps)), ranks, least=least)
        gathered = parts[0]
        for part in parts[1:]:  # rank order
            gathered.merge(part)
        for rank, reason in gathered.damaged:  # left out where the pass found them
            run.drop_rank(rank, reason)
        result = _held(gathered, run.manifest, steps)
    else:
        if run.events.num_rows == 0:
            raise UsageError(f"{run.path}: the run has no communication events to validate")
        windows = [int(s) for s in run.steps_table().column("step").to_pylist()]
        result = traced_expectations(run.events, run.manifest, windows)
    for rank in getattr(run, "missing_ranks", []):
        result.notes.append(f"rank {rank}: events missing or truncated, not held")
    return result


def _rank_tables(view: RunView, ranks: list[int]) -> Iterator[pa.Table]:
    """Each of ``ranks``' events (:data:`ROW_COLUMNS`), a rank at a time; a rank found
    damaged is left out (the view drops it, with a warning)."""
    for rank in ranks:
        try:
            yield view.read_rank(rank, ROW_COLUMNS, dictionary=False)
        except RankDamaged:
            continue
