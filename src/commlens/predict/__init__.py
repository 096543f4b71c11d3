"""The analytical model: what a job communicates, what it costs, and whether a run agrees.

- :class:`Job` — model + scheme + :class:`~commlens.job.ParallelDims` + shapes.
- :func:`predict` — per-rank calls per step (exact for commlens's workloads,
  with conventions §2's textbook volumes beside them) and step time on
  network profiles.
- :func:`validate_run` — hold a captured run against the prediction.
- :func:`get_profile` / :func:`builtin_profiles` — network profiles (TOML).
"""

from __future__ import annotations

from commlens.job.spec import Job
from commlens.predict.calls import OpVolume, PredictedCall
from commlens.predict.exact import rank_calls
from commlens.predict.forecast import Prediction, predict
from commlens.predict.profiles import NetworkProfile, builtin_profiles, get_profile, get_profiles
from commlens.predict.textbook import textbook_calls
from commlens.predict.topology import Fabric
from commlens.predict.validate import Validation, validate_events, validate_run

__all__ = [
    "Fabric",
    "Job",
    "NetworkProfile",
    "OpVolume",
    "PredictedCall",
    "Prediction",
    "Validation",
    "builtin_profiles",
    "get_profile",
    "get_profiles",
    "predict",
    "rank_calls",
    "textbook_calls",
    "validate_events",
    "validate_run",
]
