"""Hold a captured run against the model: per rank, step, op and role.

The run's manifest gives the job (``workload``: model, scheme, layout,
shapes), :mod:`commlens.predict.exact` predicts every rank's calls, and the
captured events are grouped by (rank, step, op, role). PredictedCall counts must match
exactly and the byte total (sum of ``size_bytes`` = nccl-tests S) must be
within the relative tolerance; an (op, role) seen on one side only fails.

Which steps are held (every step is checked on its own, per rank):

- steps 1 … steps−1 (the run's ``steps``, or the highest step with events),
  against the steady prediction; warm-up steps communicate the same as later
  ones, so they are held too.
- step 0, against the step-0 prediction: DDP all-reduces every gradient in
  one bucket before it rebuilds its buckets from the order gradients became
  ready, and its constructor broadcasts the parameters. ``skip_step0``
  leaves it out (for runs whose step 0 holds set-up traffic of their own).
- events after the last optimizer step (``step == steps``: end-of-run
  barriers, result gathers) are not held.

A traced run (no ``workload`` naming a model and scheme: ``commlens trace`` or
``commlens.capture`` around any script) has no model to predict from; it is
held against what its own communication implies instead
(:func:`commlens.analysis.expectations.validate_traced`), saying which
expectations could not be formed; :func:`is_traced` tells the two apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commlens.errors import CommlensError, RunFormatError, UsageError
from commlens.job.spec import Job
from commlens.numbers import MAX_TOLERANCE, check_number
from commlens.predict.calls import aggregate, sort_key
from commlens.predict.exact import rank_calls

if TYPE_CHECKING:
    import pyarrow as pa

Key = tuple[str, str]


@dataclass(frozen=True)
class Check:
    """One (rank, step, op, role): predicted against measured."""

    rank: int
    step: int
    op: str
    role: str
    predicted_calls: int
    measured_calls: int
    predicted_bytes: int
    measured_bytes: int
    ok: bool
    reason: str = ""

    @property
    def rel_error(self) -> float:
        if self.predicted_bytes == 0:
            return 0.0 if self.measured_bytes == 0 else float("inf")
        return abs(self.measured_bytes - self.predicted_bytes) / self.predicted_bytes


@dataclass(frozen=True)
class OpSummary:
    """All checks of one (op, role), over ranks and steps."""

    op: str
    role: str
    checks: int
    predicted_calls: int
    measured_calls: int
    predicted_bytes: int
    measured_bytes: int
    max_rel_error: float
    failed: int
    explanation: str

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "role": self.role,
            "ok": self.ok,
            "checks": self.checks,
            "failed": self.failed,
            "predicted_calls": self.predicted_calls,
            "measured_calls": self.measured_calls,
            "predicted_bytes": self.predicted_bytes,
            "measured_bytes": self.measured_bytes,
            "max_rel_error": self.max_rel_error,
            "explanation": self.explanation,
        }


@dataclass
class Validation:
    """The verdict on a run."""

    job: Job
    tolerance: float
    steps: list[int]
    ranks: list[int]
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def summary(self) -> list[OpSummary]:
        groups: dict[Key, list[Check]] = {}
        for c in self.checks:
            groups.setdefault((c.op, c.role), []).append(c)
        out = []
        for (op, role), checks in sorted(groups.items(), key=lambda kv: sort_key(*kv[0])):
            bad = [c for c in checks if not c.ok]
            explanation = (
                f"{len(bad)} of {len(checks)} rank-steps off, e.g. rank {bad[0].rank} "
                f"step {bad[0].step}: {bad[0].reason}"
                if bad
                else f"counts exact, bytes within {self.tolerance:.2%} on every rank and step"
            )
            out.append(
                OpSummary(
                    op=op,
                    role=role,
                    checks=len(checks),
                    predicted_calls=sum(c.predicted_calls for c in checks),
                    measured_calls=sum(c.measured_calls for c in checks),
                    predicted_bytes=sum(c.predicted_bytes for c in checks),
                    measured_bytes=sum(c.measured_bytes for c in checks),
                    max_rel_error=max(c.rel_error for c in checks),
                    failed=len(bad),
                    explanation=explanation,
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "job": self.job.describe(),
            "tolerance": self.tolerance,
            "steps": self.steps,
            "ranks": self.ranks,
            "ops": [s.to_dict() for s in self.summary()],
            "mismatches": [
                {
                    "rank": c.rank,
                    "step": c.step,
                    "op": c.op,
                    "role": c.role,
                    "predicted_calls": c.predicted_calls,
                    "measured_calls": c.measured_calls,
                    "predicted_bytes": c.predicted_bytes,
                    "measured_bytes": c.measured_bytes,
                    "reason": c.reason,
                }
                for c in self.failures
            ],
            "notes": self.notes,
        }


def measured_table(events: pa.Table) -> dict[tuple[int, int], dict[Key, tuple[int, int]]]:
    """(rank, step) → (op, role) → (calls, sum of size_bytes)."""
    if events.num_rows == 0:
        return {}
    grouped = (
        events.select(["rank", "step", "op", "role", "size_bytes"])
        .group_by(["rank", "step", "op", "role"])
        .aggregate([("size_bytes", "sum"), ("size_bytes", "count")])
    )
    out: dict[tuple[int, int], dict[Key, tuple[int, int]]] = {}
    for row in grouped.to_pylist():
        key = (int(row["rank"]), int(row["step"]))
        out.setdefault(key, {})[(row["op"], row["role"] or "")] = (
            int(row["size_bytes_count"]),
            int(row["size_bytes_sum"] or 0),
        )
    return out


def compare(
    rank: int,
    step: int,
    predicted: dict[Key, tuple[int, int]],
    measured: dict[Key, tuple[int, int]],
    tolerance: float,
) -> Iterable[Check]:
    for key in sorted(set(predicted) | set(measured), key=lambda k: sort_key(*k)):
        pc, pb = predicted.get(key, (0, 0))
        mc, mb = measured.get(key, (0, 0))
        reasons = []
        if key not in measured:
            reasons.append(f"predicted {pc} call(s), none captured")
        elif key not in predicted:
            reasons.append(f"{mc} call(s) captured, none predicted")
        else:
            if pc != mc:
                reasons.append(f"{mc} calls captured, {pc} predicted")
            err = (mb - pb) / pb if pb else (0.0 if mb == 0 else float("inf"))
            if abs(err) > tolerance:
                reasons.append(f"{mb:,} bytes captured, {pb:,} predicted ({err:+.2%})")
        yield Check(rank, step, key[0], key[1], pc, mc, pb, mb, not reasons, "; ".join(reasons))


def validate_events(
    job: Job,
    events: pa.Table,
    *,
    steps: int | None = None,
    tolerance: float = 0.01,
    skip_step0: bool = False,
) -> Validation:
    """Hold ``events`` (the capture's columns) against ``job``'s prediction."""
    tolerance = check_number(tolerance, "--tolerance", low=0.0, high=MAX_TOLERANCE)
    measured = measured_table(events)
    if not measured:
        raise UsageError("the run has no communication events to validate")
    last = steps if steps is not None else max(s for _, s in measured)
    first = 1 if skip_step0 else 0
    held = list(range(first, last))
    ranks = sorted({r for r, _ in measured})
    result = Validation(job=job, tolerance=tolerance, steps=held, ranks=ranks)
    if not held:
        raise UsageError(
            f"the run has {last} step(s) with communication; nothing to hold"
            + (" without step 0" if skip_step0 else "")
        )
    for rank in ranks:
        if rank >= job.dims.world_size:
            raise UsageError(
                f"rank {rank} in the events is outside the layout {job.dims.as_dict()}"
            )
        cache: dict[bool, dict[Key, tuple[int, int]]] = {}
        for step in held:
            if (step > 0) not in cache:
                vols = aggregate(rank_calls(job, rank, step))
                cache[step > 0] = {(v.op, v.role): (v.calls, v.bytes) for v in vols}
            got = measured.get((rank, step), {})
            result.checks.extend(compare(rank, step, cache[step > 0], got, tolerance))
    if skip_step0:
        result.notes.append("step 0 not held (--skip-step0)")
    return result


def modelled_events(events: pa.Table) -> tuple[pa.Table, int]:
    """The events the model predicts, and how many were left out.

    The set-up window (step -1) counts as step 0, whose prediction holds the
    set-up traffic (DDP's parameter broadcast). Collectives of integer
    metadata issued from C++ (``api`` ``c10d``: DDP's wrap-time checks and
    bucket-rebuild syncs) are not modelled and left out.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = events.schema.names
    if "step" in names:
        step = events.column("step")
        events = events.set_column(
            names.index("step"), "step", pc.if_else(pc.less(step, 0), pa.scalar(0, step.type), step)
        )
    if "api" not in names or "dtype" not in names:
        return events, 0
    integer = pc.is_in(
        events.column("dtype"), pa.array(["int8", "int16", "int32", "int64", "uint8"])
    )
    native = pc.equal(events.column("api"), "c10d")
    drop = pc.fill_null(pc.and_(integer, native), False)
    left_out = int(pc.sum(drop).as_py() or 0)
    return (events.filter(pc.invert(drop)), left_out) if left_out else (events, 0)


def workload_of(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The workload section: top level, or any rank's metadata (``ranks.N.meta.workload``)."""
    workload = manifest.get("workload")
    if isinstance(workload, dict):
        return workload
    for meta in (manifest.get("ranks") or {}).values():
        if isinstance(meta, dict):
            for where in (meta, meta.get("meta") or {}):
                if isinstance(where.get("workload"), dict):
                    return dict(where["workload"])
    return None


def is_traced(manifest: dict[str, Any]) -> bool:
    """Whether a run has no model to predict from: no workload naming a model and a
    scheme (a workload that names them but is not usable is an error, not a trace)."""
    workload = workload_of(manifest)
    return workload is None or not all(k in workload for k in ("model", "scheme"))


def validate_run(run: Any, tolerance: float = 0.01, skip_step0: bool = False) -> Validation:
    """Hold a loaded run (``commlens.load_run``) with a model in its manifest against
    the model (a traced run: :func:`commlens.analysis.expectations.validate_traced`)."""
    manifest = run.manifest
    workload = workload_of(manifest)
    if workload is None or is_traced(manifest):
        raise UsageError(
            f"{run.path}: the manifest names no model and scheme to predict from; "
            "`commlens validate` holds such a run against its own communication"
        )
    try:
        job = Job.from_dict(workload)
    except CommlensError as exc:
        raise RunFormatError(f"{run.path}: the manifest's workload is not usable ({exc})") from None
    steps = job.run.steps if "steps" in workload else None  # else: the last step with events
    events, bookkeeping = modelled_events(run.events)
    result = validate_events(
        job,
        events,
        steps=steps,
        tolerance=tolerance,
        skip_step0=skip_step0,
    )
    if bookkeeping:
        result.notes.append(
            f"{bookkeeping} bookkeeping call(s) over all ranks not held: integer metadata that "
            "DDP issues from C++ (its wrap-time shape checks, the bucket-rebuild syncs); "
            "the model has no such traffic"
        )
    for rank in getattr(run, "missing_ranks", []):
        result.notes.append(f"rank {rank}: events missing or truncated, not held")
    return result
