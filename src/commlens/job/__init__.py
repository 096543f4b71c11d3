"""One description of a job: the parallel layout, the model shape, the shapes of
a step and the settings of a run.

The workloads (which run a job), the analytical model (which predicts one),
the run's manifest and the command-line options all take :class:`Job`, so a
run and its prediction can never describe different jobs.
"""

from commlens.job.models import (
    PRESETS,
    ModelConfig,
    flops_per_step,
    get_preset,
    param_count,
    param_shapes,
)
from commlens.job.parallel import SCHEMES, ParallelDims, resolve_dims
from commlens.job.spec import DTYPE_BYTES, SCHEDULES, Job, RunSettings

__all__ = [
    "DTYPE_BYTES",
    "PRESETS",
    "SCHEDULES",
    "SCHEMES",
    "Job",
    "ModelConfig",
    "ParallelDims",
    "RunSettings",
    "flops_per_step",
    "get_preset",
    "param_count",
    "param_shapes",
    "resolve_dims",
]
