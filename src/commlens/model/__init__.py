"""The analytical model: what a job communicates, what it costs, and whether a run agrees.

- :class:`Job` — model + scheme + :class:`~commlens.spec.ParallelDims` + shapes.
- :func:`predict` — per-rank calls per step (exact for commlens's workloads,
  with conventions §2's textbook volumes beside them) and step time on
  network profiles.
- :func:`validate_run` — hold a captured run against the prediction.
- :func:`get_profile` / :func:`builtin_profiles` — network profiles (TOML).
"""

from __future__ import annotations

from commlens.model.calls import Call, OpVolume
from commlens.model.exact import rank_calls
from commlens.model.job import Job, job_from_workload
from commlens.model.predict import Prediction, predict
from commlens.model.profiles import NetworkProfile, builtin_profiles, get_profile, get_profiles
from commlens.model.textbook import textbook_calls
from commlens.model.topology import Fabric
from commlens.model.validate import Validation, validate_events, validate_run

__all__ = [
    "Call",
    "Fabric",
    "Job",
    "NetworkProfile",
    "OpVolume",
    "Prediction",
    "Validation",
    "builtin_profiles",
    "get_profile",
    "get_profiles",
    "job_from_workload",
    "predict",
    "rank_calls",
    "textbook_calls",
    "validate_events",
    "validate_run",
]
