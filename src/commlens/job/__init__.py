"""Shared descriptions of a job: the parallel layout and the model shape.

Both the workloads (which run a job) and the analytical model (which
predicts one) take these objects, so a run and its prediction can never
describe different layouts.
"""

from commlens.job.models import (
    PRESETS,
    ModelConfig,
    flops_per_step,
    get_preset,
    param_count,
    param_shapes,
)
from commlens.job.parallel import ParallelDims

__all__ = [
    "PRESETS",
    "ModelConfig",
    "ParallelDims",
    "flops_per_step",
    "get_preset",
    "param_count",
    "param_shapes",
]
