"""A run's typical step: the one definition that ``commlens run``'s summary and
``commlens compare`` both quote.

A step's time is the slowest rank's step window; its communication and
exposed time are means over the ranks (:func:`commlens.analysis.steps.step_summary`).
The measured steps are the job's steps (set-up and the tail after the last
step are no steps) without warm-up: the steps a ``commlens run`` manifest
flags ``warmup``, else the first step, unless no other step is left. The
typical step is the median of each figure over the measured steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from commlens.analysis.rankpass import Source, rank_pass
from commlens.analysis.steps import step_summary, step_table

DEFINITION = (
    "step = median over the measured steps of the slowest rank's step (set-up and warm-up "
    "left out: the steps the run flags as warm-up, else the first)"
)
"""The definition in words, for the notes of every command that quotes it."""


def warmup_steps(manifest: dict[str, Any]) -> set[int]:
    """Steps a ``commlens run`` manifest flags as warm-up."""
    records = manifest.get("steps_metrics")
    if not isinstance(records, list):
        return set()
    return {
        int(r["step"])
        for r in records
        if isinstance(r, dict) and r.get("warmup") and isinstance(r.get("step"), int)
    }


def measured_steps(steps: list[int], manifest: dict[str, Any]) -> list[int]:
    """``steps`` (the job's, sorted) without warm-up; all of them when none would be left."""
    if len(steps) < 2:
        return steps
    warm = warmup_steps(manifest) or {steps[0]}
    return [s for s in steps if s not in warm] or steps


@dataclass(frozen=True)
class TypicalStep:
    """Medians over the measured steps (``steps``, in order) of one run."""

    steps: list[int]
    step_s: float
    comm_s: float
    exposed_s: float
    bytes: float
    """Bytes of the whole job per step (all ranks), mean over the measured steps."""
    ops: float
    """Ops of the whole job per step, mean over the measured steps."""
    pooled_share: float
    """Communication over step time of the measured steps, every rank's taken together:
    what the ops' shares of :func:`commlens.analysis.opshare.op_parts` add up to."""

    @property
    def comm_share(self) -> float:
        return self.comm_s / self.step_s if self.step_s else 0.0

    @property
    def exposed_share(self) -> float:
        return self.exposed_s / self.step_s if self.step_s else 0.0


def typical_step(run: Source) -> TypicalStep:
    """The typical step of ``run`` (see the module docstring)."""
    rp = rank_pass(run)
    per_rank = step_table(rp)
    job = per_rank.filter(pc.equal(per_rank["kind"], "step"))
    per_step = step_summary(job if job.num_rows else per_rank).to_pylist()
    kept = set(measured_steps([r["step"] for r in per_step], rp.manifest))
    rows = [r for r in per_step if r["step"] in kept]
    mine = [r for r in (job if job.num_rows else per_rank).to_pylist() if r["step"] in kept]
    time_s = sum(r["step_s"] or 0.0 for r in mine)

    def median(key: str) -> float:
        return float(statistics.median(r[key] or 0.0 for r in rows)) if rows else 0.0

    def mean(key: str) -> float:
        return statistics.fmean(float(r[key] or 0) for r in rows) if rows else 0.0

    return TypicalStep(
        steps=[r["step"] for r in rows],
        step_s=median("step_s"),
        comm_s=median("comm_s"),
        exposed_s=median("exposed_s"),
        bytes=mean("bytes"),
        ops=mean("ops"),
        pooled_share=sum(r["comm_s"] or 0.0 for r in mine) / time_s if time_s > 0 else 0.0,
    )
