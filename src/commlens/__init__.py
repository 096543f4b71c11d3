"""commlens: show, measure and predict the communication of distributed training.

The names below load on first use, so ``import commlens`` (and every
``commlens`` command that does not capture) does not pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commlens.version import __version__

if TYPE_CHECKING:
    from commlens.capture import Capture, add_meta, capture, phase, set_group_role, step
    from commlens.trace import Run, load_run

_LAZY = {
    "Capture": "commlens.capture",
    "add_meta": "commlens.capture",
    "capture": "commlens.capture",
    "phase": "commlens.capture",
    "set_group_role": "commlens.capture",
    "step": "commlens.capture",
    "Run": "commlens.trace",
    "load_run": "commlens.trace",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'commlens' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
