"""Every call one rank of a commlens workload issues in one step.

The dp, tp and pp parts are independent (``exact_dp``, ``exact_tp``,
``exact_pp``); a 3d job issues the three sets. Step 0 differs from later
steps only where PyTorch builds state lazily (DDP's buckets before their
rebuild).
"""

from __future__ import annotations

from commlens.job.spec import Job
from commlens.predict.calls import PredictedCall
from commlens.predict.exact_dp import dp_calls
from commlens.predict.exact_pp import pp_calls
from commlens.predict.exact_tp import tp_calls


def rank_calls(job: Job, rank: int, step: int = 1) -> list[PredictedCall]:
    """The calls of ``rank`` in ``step`` (any step > 0 is a steady step)."""
    return dp_calls(job, rank, step) + tp_calls(job, rank) + pp_calls(job, rank)
