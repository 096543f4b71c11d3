"""Built-in training jobs: GPT, BERT and T5 under DP, ZeRO-1/2/3, TP, PP and 3D.

``commlens run`` launches ranks of :mod:`commlens.workloads.worker`; each
builds its part of the model (:func:`parallelize`) and trains it
(:func:`train`) under a capture. See :mod:`commlens.workloads.parallelize`
for which collectives each scheme really issues.

The job they train is :class:`commlens.job.Job`. Exports load lazily, so
that reading a job does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "workload_from_options": "commlens.workloads.config",
    "Parallelized": "commlens.workloads.parallelize",
    "parallelize": "commlens.workloads.parallelize",
    "StepRecord": "commlens.workloads.train",
    "train": "commlens.workloads.train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
