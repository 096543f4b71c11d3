"""Intercept torch.distributed traffic in each rank and write events."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

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


class _CallableModule(types.ModuleType):
    """``commlens.capture`` is this package once it is imported: keep it callable,
    so ``commlens.capture("runs/x")`` works however the package was reached."""

    def __call__(self, out_dir: str | os.PathLike[str], **kwargs: Any) -> Capture:
        return capture(out_dir, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
