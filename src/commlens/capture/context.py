"""Where the program is when an op is issued: step, phase and module.

Steps come from global optimizer-step hooks (or explicit ``commlens.step()``),
the phase from the optimizer depth and autograd's current graph task, and the
module from a walk up the Python stack to the innermost ``nn.Module`` call:
nothing runs per module call, only per communication op.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import torch
from torch.nn.modules.module import Module

from commlens.spec.ops import PHASES

_CALL_IMPL_CODE = Module._call_impl.__code__


class ThreadState(threading.local):
    """Per-thread capture state: nesting depth and hints from the caller."""

    depth: int = 0
    api: str = "python"
    role_hint: str = ""
    phase_hint: str = ""


TLS = ThreadState()


class StepTracker:
    """Counts steps and remembers when each one started and ended."""

    def __init__(self, clock: Any = time.time_ns) -> None:
        self.clock = clock
        self.step = 0
        self.optimizer_depth = 0
        self.explicit = False
        self.max_steps_kept = 100_000
        self.steps: list[dict[str, int]] = []
        self._t_start = clock()
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._handles = [
            register_optimizer_step_pre_hook(self._pre),
            register_optimizer_step_post_hook(self._post),
        ]

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, *_: Any) -> None:
        self.optimizer_depth += 1

    def _post(self, *_: Any) -> None:
        self.optimizer_depth = max(0, self.optimizer_depth - 1)
        if self.optimizer_depth == 0 and not self.explicit:
            self.advance()

    def restart(self) -> None:
        """Step 0 starts now (when the process group comes up, not at import)."""
        if self.step == 0:
            self._t_start = self.clock()

    def mark(self) -> None:
        """An explicit step boundary; from now on optimizer steps are not counted."""
        self.explicit = True
        self.advance()

    def advance(self) -> None:
        now = self.clock()
        if len(self.steps) < self.max_steps_kept:
            self.steps.append({"step": self.step, "t_start_ns": self._t_start, "t_end_ns": now})
        self._t_start = now
        self.step += 1


class ModuleNames:
    """Qualified module names, computed once per root module."""

    def __init__(self) -> None:
        self._by_root: weakref.WeakKeyDictionary[Module, dict[int, str]] = (
            weakref.WeakKeyDictionary()
        )

    def name(self, root: Module, module: Module) -> str:
        names = self._by_root.get(root)
        if names is None or id(module) not in names:
            names = {id(m): n for n, m in root.named_modules(remove_duplicate=False)}
            self._by_root[root] = names
        name = names.get(id(module), "")
        return name or type(root).__name__


MODULE_NAMES = ModuleNames()


def current_phase_and_module(steps: StepTracker, start: FrameType | None) -> tuple[str, str]:
    """(phase, module) of the code that issued the op, ``start`` being its frame."""
    inner: Module | None = None
    root: Module | None = None
    frame = start
    while frame is not None:
        if frame.f_code is _CALL_IMPL_CODE:
            mod = frame.f_locals.get("self")
            if isinstance(mod, Module):
                if inner is None:
                    inner = mod
                root = mod
        frame = frame.f_back
    module = MODULE_NAMES.name(root, inner) if inner is not None and root is not None else ""
    if TLS.phase_hint:
        phase = TLS.phase_hint
    elif steps.optimizer_depth > 0:
        phase = "optimizer"
    elif torch._C._current_graph_task_id() != -1:
        phase = "backward"
    elif inner is not None:
        phase = "forward"
    else:
        phase = "other"
    return phase, module


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Label the ops issued inside as ``name`` (forward/backward/optimizer/other).

    For code whose phase the stack cannot tell, such as a pipeline schedule's
    sends and receives, which run outside any module and any autograd pass.
    """
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; expected one of {', '.join(PHASES)}")
    saved = TLS.phase_hint
    TLS.phase_hint = name
    try:
        yield
    finally:
        TLS.phase_hint = saved
