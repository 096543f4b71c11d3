"""Intercept torch.distributed traffic in each rank and write events."""

from commlens.capture.context import phase
from commlens.capture.patching import is_patched
from commlens.capture.session import (
    Capture,
    active,
    add_meta,
    capture,
    set_group_role,
    start_from_env,
    step,
)

__all__ = [
    "Capture",
    "active",
    "add_meta",
    "capture",
    "is_patched",
    "phase",
    "set_group_role",
    "start_from_env",
    "step",
]
