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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import get_ident
from types import FrameType
from typing import Any

import torch
from torch.nn.modules.module import Module

from commlens.optable import PHASES

_CALL_IMPL_CODE = Module._call_impl.__code__
_graph_task_id = torch._C._current_graph_task_id


class ThreadState:
    """Per-thread capture state: nesting depth and the phase the caller named."""

    __slots__ = ("depth", "phase_hint")

    def __init__(self) -> None:
        self.depth = 0  # 1 while an intercepted call runs (calls inside are not recorded)
        self.phase_hint = ""  # from commlens.phase()


# By thread id: a dict lookup and slot reads cost less per call than threading.local.
STATES: dict[int, ThreadState] = {}


def thread_state() -> ThreadState:
    """This thread's state (made on first use)."""
    ident = get_ident()
    state = STATES.get(ident)
    if state is None:
        if len(STATES) > 4096:  # many short-lived threads: keep the living ones
            alive = {t.ident for t in threading.enumerate()}
            for dead in [i for i in STATES if i not in alive]:
                del STATES[dead]
        state = STATES[ident] = ThreadState()
    return state


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
        self.on_advance: Callable[[], None] | None = None  # run at each step boundary

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
        if self.on_advance is not None:
            self.on_advance()


class ModuleNames:
    """Qualified module names, computed once per root module."""

    def __init__(self) -> None:
        self._by_root: weakref.WeakKeyDictionary[Module, dict[int, str]] = (
            weakref.WeakKeyDictionary()
        )
        # (id(root), id(module)) -> (root ref, module ref, name): no weakref made per call.
        self._seen: dict[tuple[int, int], tuple[weakref.ref[Module], weakref.ref[Module], str]] = {}

    def name(self, root: Module, module: Module) -> str:
        hit = self._seen.get((id(root), id(module)))
        if hit is not None and hit[0]() is root and hit[1]() is module:
            return hit[2]
        names = self._by_root.get(root)
        if names is None or id(module) not in names:
            names = {id(m): n for n, m in root.named_modules(remove_duplicate=False)}
            self._by_root[root] = names
        name = names.get(id(module), "") or type(root).__name__
        if len(self._seen) > 100_000:  # modules made and dropped in a loop
            self._seen.clear()
        self._seen[(id(root), id(module))] = (weakref.ref(root), weakref.ref(module), name)
        return name


MODULE_NAMES = ModuleNames()


_OTHER = ("other", "")  # the phase and module of an op outside any model code


def current_phase_and_module(
    steps: StepTracker, start: FrameType | None, phase_hint: str
) -> tuple[str, str]:
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
    if phase_hint:
        phase = phase_hint
    elif steps.optimizer_depth:
        phase = "optimizer"
    elif _graph_task_id() != -1:
        phase = "backward"
    elif inner is None:
        return _OTHER
    else:
        phase = "forward"
    if inner is None or root is None:
        return phase, ""
    return phase, MODULE_NAMES.name(root, inner)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Label the ops issued inside as ``name`` (forward/backward/optimizer/other).

    For code whose phase the stack cannot tell, such as a pipeline schedule's
    sends and receives, which run outside any module and any autograd pass.
    """
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; expected one of {', '.join(PHASES)}")
    state = thread_state()
    saved = state.phase_hint
    state.phase_hint = name
    try:
        yield
    finally:
        state.phase_hint = saved
