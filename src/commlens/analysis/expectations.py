"""What a traced job's own communication implies, held against what it issued.

For a run without a model (made by ``commlens trace`` or ``commlens.capture``
around any script) the expectations come from the events themselves, over
the job's steps after the first (set-up, warm-up and the tail after the last
step left out):

- every collective matched across its group (the k-th call of an op on a
  group on each member) has the same ``size_bytes`` on every member;
- data-parallel gradient all-reduces (``all_reduce`` on a ``dp`` group, or
  issued in backward on a group without a role): every synced step (a step
  with any) all-reduces the same bytes in the same number of calls, on every
  rank of the group — the sum of the bucket sizes, once per step;
- sharded data parallel (FSDP, ZeRO): each group's ``reduce_scatter`` and
  ``all_gather`` bytes per step are the same on every step and rank.

Expectations that need what the job wrapped (DDP all-reduce bytes = the
gradient bytes of its parameters, FSDP all-gather/reduce-scatter = shard
bytes) can only be formed when the manifest records the wrapped parameters;
they are listed as not formed otherwise, saying why.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

P2P = {"send", "recv", "send_object", "recv_object", "isend", "irecv"}


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


def _rows(events: pa.Table) -> list[dict[str, Any]]:
    cols = ["rank", "seq", "step", "op", "pg_name", "role", "phase", "size_bytes", "group_size"]
    return events.select([c for c in cols if c in events.schema.names]).to_pylist()


def held_steps(events: pa.Table, windows: list[int]) -> list[int]:
    """The job's steps after its first (set-up, step −1, left out too): the recorded
    step windows, else the event steps."""
    steps = sorted(set(windows)) or sorted({int(s) for s in events.column("step").to_pylist()})
    steps = [s for s in steps if s >= 0]  # step -1: the set-up window
    return steps[1:] if len(steps) > 1 else steps


def _matched_sizes(rows: list[dict[str, Any]]) -> list[Expectation]:
    calls: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    roles: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: (r["rank"], r["seq"])):
        if r["op"] in P2P or (r["group_size"] or 1) < 2:
            continue
        calls[(r["pg_name"], r["op"])][r["rank"]].append(int(r["size_bytes"] or 0))
        roles[r["pg_name"]] = r["role"] or roles.get(r["pg_name"], "")
        sizes[r["pg_name"]] = int(r["group_size"])
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
                seen = {rank: v[k] for rank, v in per_rank.items() if k < len(v)}
                if len(set(seen.values())) > 1 and not bad:
                    bad.append(f"{op} call {k + 1}: sizes {seen}")
        partial = any(len(v) < sizes[pg] for (g, _), v in calls.items() if g == pg)
        detail = bad[0] if bad else f"{instances} collective calls, same size on every member"
        if partial and not bad:
            detail += " (not every member recorded this group)"
        out.append(Expectation("same size on every member", pg, roles[pg], True, not bad, detail))
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
    """A data-parallel gradient all-reduce: on a ``dp`` group, or issued in backward on
    a group without a role (not a tensor-parallel one)."""
    return bool(row["role"] == "dp" or (not row["role"] and row["phase"] == "backward"))


def _wrapped(manifest: dict[str, Any]) -> Any:
    """What the capture recorded about the wrapped parameters, if anything."""
    if manifest.get("wrapped"):
        return manifest["wrapped"]
    for meta in (manifest.get("ranks") or {}).values():
        inner = meta.get("meta") if isinstance(meta, dict) else None
        if isinstance(inner, dict) and inner.get("wrapped"):
            return inner["wrapped"]
    return None


def traced_expectations(
    events: pa.Table, manifest: dict[str, Any], windows: list[int]
) -> TracedValidation:
    """Form and hold the expectations (module docstring) over the events of a traced run."""
    steps = held_steps(events, windows)
    kept = set(steps)
    rows = [r for r in _rows(events) if r["step"] in kept]
    result = TracedValidation(steps=steps, ranks=sorted({int(r["rank"]) for r in rows}))
    roles = {r["pg_name"]: r["role"] or "" for r in rows if r["role"]}
    result.expectations.extend(_matched_sizes(rows))
    ddp = _per_step(
        rows, kept, "all_reduce", lambda r: r["phase"] == "backward" or r["role"] == "dp"
    )
    for pg, per in sorted(ddp.items()):
        name = "dp all-reduce bytes per synced step constant"
        result.expectations.append(_constant(name, pg, roles.get(pg, ""), per))
    sharded = []
    for op in ("reduce_scatter", "all_gather"):
        for pg, per in sorted(_per_step(rows, kept, op, lambda r: True).items()):
            sharded.append(pg)
            name = f"{op} bytes per step constant"
            result.expectations.append(_constant(name, pg, roles.get(pg, ""), per))
    wrapped = _wrapped(manifest)
    why = (
        "the manifest records no wrapped parameters"
        if wrapped is None
        else "the manifest's wrapped section is not one this version reads"
    )
    for pg in sorted(ddp):
        result.expectations.append(
            Expectation(
                "dp all-reduce bytes = gradient bytes of the wrapped parameters",
                pg,
                roles.get(pg, ""),
                False,
                False,
                f"not formed: {why}",
            )
        )
    for pg in sorted(set(sharded)):
        result.expectations.append(
            Expectation(
                "all-gather / reduce-scatter bytes = shard bytes of the wrapped parameters",
                pg,
                roles.get(pg, ""),
                False,
                False,
                f"not formed: {why}",
            )
        )
    if steps:
        result.notes.append(
            f"held steps {steps[0]}..{steps[-1]}: the job's steps after the first; set-up and "
            "the tail after the last step are left out"
        )
    else:
        result.notes.append("the run has no steps with communication: nothing held")
    return result
