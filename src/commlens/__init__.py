"""commlens: show, measure and predict the communication of distributed training."""

from __future__ import annotations

__version__ = "0.1.0"

from commlens.capture import Capture, add_meta, capture, set_group_role, step
from commlens.trace import Run, load_run

__all__ = [
    "Capture",
    "Run",
    "__version__",
    "add_meta",
    "capture",
    "load_run",
    "phase",
    "set_group_role",
    "step",
]
