"""Built-in training jobs: GPT, BERT and T5 under DP, ZeRO-1/2/3, TP, PP and 3D.

``commlens run`` launches ranks of :mod:`commlens.workloads.worker`; each
builds its part of the model (:func:`parallelize`) and trains it
(:func:`train`) under a capture. See ``parallelize`` for which collectives
each scheme really issues.
"""

from commlens.workloads.config import WorkloadConfig, resolve_dims
from commlens.workloads.parallelize import Parallelized, parallelize
from commlens.workloads.train import StepRecord, train

__all__ = [
    "Parallelized",
    "StepRecord",
    "WorkloadConfig",
    "parallelize",
    "resolve_dims",
    "train",
]
