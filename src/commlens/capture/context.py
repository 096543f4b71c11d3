"""Where the program is when an op is issued: step, phase and module.

Steps: a step runs from its first module forward to the next step's first
forward, so what a job issues after its optimizer step (ZeRO's parameter
all-gathers, metric all-reduces, logging gathers) stays in it; in a loop
without module forwards, from one optimizer step (or ``commlens.step()``) to
the next. Ops issued before the first step (DDP's parameter checks,
``deepspeed.initialize``, a broadcast of the weights before the first
forward) are set-up, step -1, unless no forward starts the first step: in a
loop without forwards, what comes before its first optimizer step or
``commlens.step()`` is that step's own; a
last step that ran forwards but no optimizer step is the tail after the last
step (its window's ``segment``). The phase comes from a hint (framework
hooks, ``commlens.phase()``), the optimizer depth and autograd's current
graph task, in that order: an op in autograd's backward is backward and one
inside a module's forward is forward, even inside an optimizer step (a
closure given to ``optimizer.step`` runs both); an op outside modules after
a step's forward and before its backward (the loss: loss-parallel
reductions) is forward; the rest of an optimizer step is optimizer. The module: in
forward the innermost ``nn.Module`` call on the Python stack; in backward
the module a framework hook names on the stack (FSDP2's parameter group,
ZeRO-3's ``sub_module``), else the module whose forward made the autograd
node being run (:mod:`commlens.capture.spans`). Names are ``named_modules``
paths, ``(root)`` for the outermost module.
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

from commlens.capture.spans import ForwardSpans, current_node
from commlens.optable import PHASES

_CALL_IMPL_CODE = Module._call_impl.__code__
_graph_task_id = torch._C._current_graph_task_id
_next_seq = torch._C._autograd._get_sequence_nr
_compiling = torch.compiler.is_dynamo_compiling
_Tensor = torch.Tensor

SETUP_STEP = -1
"""The step of ops issued before the first step (set-up)."""
ROOT_NAME = "(root)"
"""The module path written for the outermost module itself."""


class ThreadState:
    """Per-thread capture state: nesting depth and the phase the caller named."""

    __slots__ = ("depth", "inflight", "phase_hint")

    def __init__(self) -> None:
        self.depth = 0  # 1 while an intercepted call runs (calls inside are not recorded)
        self.phase_hint = ""  # from commlens.phase()
        # (call, calling frame, t_issue) of the intercepted call running on this thread,
        # read by the writer thread's checkpoint (capture.inflight); when the call raised,
        # (call, frame, t_issue, error) until the thread's next call.
        self.inflight: tuple[Any, ...] | None = None


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
    """Counts steps and remembers when each one started and ended.

    ``step`` is -1 (set-up) until the first step starts: at the first module
    forward or the first step boundary (:meth:`begin`). Ops issued before it
    outside a module constructor (a broadcast of the weights) are undecided:
    if a forward then starts step 0 they were set-up; if an optimizer step or
    ``commlens.step()`` ends step 0 (a loop without forwards) they were its,
    and :attr:`on_decided` is told so (they are written as set-up, and the
    reader counts them in step 0). Where modules run forward, an optimizer step
    leaves its step open until the next forward, or the next point-to-point op
    (:meth:`p2p_after_step`), starts the next one.
    """

    def __init__(self, clock: Any = time.time_ns) -> None:
        self.clock = clock
        self.step = SETUP_STEP
        self.optimizer_depth = 0
        self.explicit = False
        self.max_steps_kept = 100_000
        self.steps: list[dict[str, Any]] = []
        self.forward_seen = False  # a module forward has run: steps start at forwards
        self.stepped = False  # the open step has had its optimizer step
        self.setup_ops = False  # ops were issued in set-up: it gets a window
        self.undecided = 0  # ops issued in set-up outside constructors, not yet placed
        self.t_undecided = 0  # when the first of them was issued (the recorder says)
        self.on_decided: Callable[[], None] | None = None  # they were the first step's
        self.forwarded = False  # a forward ran in this step, before its optimizer step
        self.roots: weakref.WeakSet[Module] = weakref.WeakSet()  # outermost modules run
        self.spans = ForwardSpans()  # which module call made each autograd node
        self.backward_began = False  # autograd reached the last root forward's output
        self._depth = [0]  # module calls in progress on the model's thread
        self._live = False  # installed: module calls go through self._call
        self._call_orig: Any = None  # Module.__call__ before install
        self._call: Any = None
        self._t_start = clock()
        self._t_stepped = 0
        self._handles: list[Any] = []
        self.on_advance: Callable[[], None] | None = None  # run at each step boundary
        self.on_first_forward: Callable[[], None] | None = None

    def install(self) -> None:
        if self._live:
            return
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._handles = [
            register_optimizer_step_pre_hook(self._pre),
            register_optimizer_step_post_hook(self._post),
        ]
        self._live = True
        self._call_orig = Module.__dict__["__call__"]
        self._call = self._make_module_call(self._call_orig)
        # Not global module hooks: those take every module call off torch's hook-free path.
        self.wrap_calls()

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._live = False
        self.unwrap_calls()
        self.finish()

    def wrap_calls(self) -> None:
        """Module calls go through the tracker (while installed); undone by :meth:`unwrap_calls`."""
        if self._live:
            Module.__call__ = self._call  # type: ignore[method-assign]

    def unwrap_calls(self) -> None:
        """Module calls go straight to torch again (the tracker stays installed otherwise)."""
        if self._call is not None and Module.__dict__["__call__"] is self._call:
            Module.__call__ = self._call_orig  # type: ignore[method-assign]

    def _pre(self, *_: Any) -> None:
        self.optimizer_depth += 1

    def _post(self, *_: Any) -> None:
        self.optimizer_depth = max(0, self.optimizer_depth - 1)
        if self.optimizer_depth:
            return
        self.forwarded = False
        if self.explicit:
            return
        if self.step == SETUP_STEP:
            self.begin(ends_step=True)
        if self.forward_seen:  # the step goes on until the next forward
            self.stepped = True
            self._t_stepped = self.clock()
        else:
            self.advance()

    def _make_module_call(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """``Module.__call__`` while installed: ``orig``, its autograd nodes' span recorded.

        The span covers the module's own hooks: a parallel style's input and
        output redistributions are the module's in backward too.
        """
        depth = self._depth
        spans = self.spans
        ends, starts = spans.ends, spans.starts
        root_forward = self._root_forward
        root_output = self._root_output

        def call(module: Module, *args: Any, **kwargs: Any) -> Any:
            if _compiling():  # traced by torch.compile: no graph break, no span
                return orig(module, *args, **kwargs)
            if not depth[0]:
                root_forward(module)
            elif spans.thread != get_ident():  # another thread's modules: not the model's
                return orig(module, *args, **kwargs)
            start = _next_seq()
            depth[0] += 1
            try:
                output = orig(module, *args, **kwargs)
            finally:
                depth[0] -= 1
            end = _next_seq()
            if end != start:
                ends.append(end)
                starts.append((start, module))
                if not depth[0]:
                    root_output(output)
            return output

        call.__name__ = call.__qualname__ = "__call__"
        call.__wrapped__ = orig  # type: ignore[attr-defined]
        return call

    def _root_output(self, output: Any) -> None:
        """Note when backward first reaches a root forward's output (its loss is forward)."""
        node = _first_grad_fn(output)
        if node is not None:
            node.register_prehook(self._reached)

    def _reached(self, _grads: Any) -> None:
        self.backward_began = True

    def _root_forward(self, module: Module) -> None:
        """An outermost module's forward begins: the first forward, or the next step's."""
        self.roots.add(module)
        self.spans.claim()
        if not self.forward_seen:
            self.forward_seen = True
            if self.on_first_forward is not None:
                self.on_first_forward()
        if self.step == SETUP_STEP:
            self.begin()
        elif self.stepped and not self.explicit:
            self.advance()
        # After the step boundary, which clears them: this step's forward has begun.
        self.forwarded = True
        self.backward_began = False

    def p2p_after_step(self) -> None:
        """A point-to-point op after the optimizer step: the next step has begun.

        A pipeline stage past the first starts each step by receiving its
        activations, before its own forward; collectives after the optimizer
        step (ZeRO's parameter all-gathers, metric reductions) stay in it.
        """
        if self.stepped and not self.explicit:
            self.advance()

    def restart(self) -> None:
        """Set-up starts now (when the process group comes up, not at import)."""
        if self.step == SETUP_STEP and not self.steps:
            self._t_start = self.clock()

    def undecide(self) -> None:
        """An op outside a module constructor in set-up: placed when the first step shows."""
        if not self.undecided:
            self.t_undecided = self.clock()
        self.undecided += 1

    def begin(self, ends_step: bool = False) -> None:
        """The first step starts now; what came before was set-up.

        With ``ends_step`` (an optimizer step, ``commlens.step()``) the first
        step ends here instead: ops issued since the first undecided one were
        its own, and it started then.
        """
        if self.step != SETUP_STEP:
            return
        now = self.clock()
        start = now
        undecided = self.undecided > 0
        if undecided and ends_step:
            start = min(self.t_undecided, now)
        elif undecided:
            self.setup_ops = True
        if self.setup_ops:
            window = {"step": SETUP_STEP, "t_start_ns": self._t_start, "t_end_ns": start}
            self.steps.append({**window, "segment": "setup"})
        self._t_start = start
        self.step = 0
        if undecided and ends_step and self.on_decided is not None:
            self.on_decided()

    def mark(self) -> None:
        """An explicit step boundary; from now on optimizer steps and forwards are not counted."""
        self.explicit = True
        if self.step == SETUP_STEP and not self.undecided:
            self.begin()
        else:
            self.begin(ends_step=True)  # ops before the first mark: its step
            self.advance()

    def advance(self) -> None:
        now = self.clock()
        if len(self.steps) < self.max_steps_kept:
            self.steps.append({"step": self.step, "t_start_ns": self._t_start, "t_end_ns": now})
        self._t_start = now
        self.step += 1
        self.stepped = self.forwarded = False
        self.spans.next_step()
        if self.on_advance is not None:
            self.on_advance()

    def finish(self) -> None:
        """Close the open step at the end of the capture.

        A step whose optimizer step ran ends there; one that ran forwards but
        no optimizer step, after earlier steps did, is the tail after the last
        step (``segment`` "after last step").
        """
        if self.step == SETUP_STEP and self.undecided:  # no step ever shown: a loop's first
            self.begin(ends_step=True)
        if self.step == SETUP_STEP or len(self.steps) >= self.max_steps_kept:
            return
        if self.stepped:
            window = {"step": self.step, "t_start_ns": self._t_start, "t_end_ns": self._t_stepped}
        elif self.forward_seen and not self.explicit and self.step > 0:
            window = {"step": self.step, "t_start_ns": self._t_start, "t_end_ns": self.clock(),
                      "segment": "after last step"}  # fmt: skip
        else:
            return
        self.steps.append(window)
        self.stepped = False
        self.step += 1
        self._t_start = self.clock()


def _first_grad_fn(output: Any) -> Any:
    """The grad_fn of a module output's first tensor (tensor, sequence or mapping)."""
    if isinstance(output, _Tensor):
        return output.grad_fn
    if isinstance(output, (tuple, list)):
        for item in output:
            if isinstance(item, _Tensor):
                return item.grad_fn
        return None
    if isinstance(output, dict):
        for item in output.values():
            if isinstance(item, _Tensor):
                return item.grad_fn
    return None


class ModuleNames:
    """Qualified module names, and the module holding each parameter, found once per root."""

    def __init__(self) -> None:
        # root -> (id(module) -> path, id(parameter) -> path of the module holding it)
        self._by_root: weakref.WeakKeyDictionary[Module, tuple[dict[int, str], dict[int, str]]] = (
            weakref.WeakKeyDictionary()
        )
        # (id(root), id(module)) -> (root ref, module ref, name): no weakref made per call.
        self._seen: dict[tuple[int, int], tuple[weakref.ref[Module], weakref.ref[Module], str]] = {}
        self._unheld: dict[int, weakref.ref[torch.Tensor]] = {}  # parameters no root holds
        # ids of a set of roots -> those roots, outermost first
        self._order: dict[tuple[int, ...], list[weakref.ref[Module]]] = {}

    def _tables(self, root: Module, key: int, which: int) -> tuple[dict[int, str], dict[int, str]]:
        """``root``'s tables, scanned again when ``key`` is not in table ``which``."""
        tables = self._by_root.get(root)
        if tables is None or key not in tables[which]:
            names: dict[int, str] = {}
            held: dict[int, str] = {}
            for name, m in root.named_modules(remove_duplicate=False):
                names[id(m)] = name
                for p in m._parameters.values():
                    if p is not None:  # a tied weight: its first holder, as torch names it
                        held.setdefault(id(p), name)
            tables = self._by_root[root] = (names, held)
        return tables

    def name(self, root: Module, module: Module) -> str:
        hit = self._seen.get((id(root), id(module)))
        if hit is not None and hit[0]() is root and hit[1]() is module:
            return hit[2]
        name = self._tables(root, id(module), 0)[0].get(id(module), "") or ROOT_NAME
        if len(self._seen) > 100_000:  # modules made and dropped in a loop
            self._seen.clear()
        self._seen[(id(root), id(module))] = (weakref.ref(root), weakref.ref(module), name)
        return name

    def ordered(self, roots: Any) -> list[Module]:
        """``roots`` outermost first, the same order in every run.

        A root that another root holds (a model run both inside its DDP or Fabric
        wrapper and on its own, as an evaluation often does) comes after the one
        holding it, so an op is named by one path in forward and backward; roots
        that hold each other in neither way, larger first, then by class name.
        """
        current = list(roots)
        if len(current) < 2:
            return current
        key = tuple(sorted(map(id, current)))
        hit = self._order.get(key)
        if hit is not None:
            got = [ref() for ref in hit]
            if all(m is not None for m in got):
                return got  # type: ignore[return-value]

        def held_by(root: Module) -> int:
            return sum(
                1
                for other in current
                if other is not root and id(root) in self._tables(other, id(root), 0)[0]
            )

        def size(root: Module) -> int:
            return len(self._tables(root, id(root), 0)[0])

        order = sorted(current, key=lambda r: (held_by(r), -size(r), type(r).__qualname__))
        if len(self._order) > 1_000:
            self._order.clear()
        self._order[key] = [weakref.ref(m) for m in order]
        return order

    def find(self, roots: Any, module: Module) -> str:
        """``module``'s path under the outermost of ``roots`` holding it, or ""."""
        for root in self.ordered(roots):
            if id(module) in self._tables(root, id(module), 0)[0]:
                return self.name(root, module)
        return ""

    def holder(self, roots: Any, param: torch.Tensor) -> str:
        """The path of the module holding ``param`` directly, under the outermost of ``roots``
        holding it, or "". A parameter two modules share (a tied embedding) is its first
        holder's, as ``named_parameters`` names it."""
        miss = self._unheld.get(id(param))
        if miss is not None and miss() is param:
            return ""
        for root in self.ordered(roots):
            held = self._tables(root, id(param), 1)[1]
            if id(param) in held:
                return held[id(param)] or ROOT_NAME
        if len(self._unheld) > 10_000:
            self._unheld.clear()
        self._unheld[id(param)] = weakref.ref(param)
        return ""


MODULE_NAMES = ModuleNames()
_HOOK_LOCALS = ("sub_module", "module")  # ZeRO-3's and other frameworks' backward hooks


def backward_module(steps: StepTracker, start: FrameType | None) -> str:
    """The path of the module whose backward issued an op, or ""."""
    frame = start
    while frame is not None:
        local = frame.f_locals
        owner = local.get("self")
        fqn = getattr(owner, "_module_fqn", None)  # FSDP2's parameter group
        if isinstance(fqn, str):
            # Named from the outermost module, as its forward is (FSDP's own path is
            # from the module fully_shard was given: a wrapper around it would differ).
            held = getattr(owner, "modules", None)
            if isinstance(held, (tuple, list)) and held and isinstance(held[0], Module):
                found = MODULE_NAMES.find(steps.roots, held[0])
                if found:
                    return found
            return fqn or ROOT_NAME
        for key in _HOOK_LOCALS:
            mod = local.get(key)
            if isinstance(mod, Module):
                return MODULE_NAMES.find(steps.roots, mod)
        frame = frame.f_back
    node = current_node()
    if node is None:
        return ""
    param = getattr(node, "variable", None)  # a gradient accumulator: its parameter's module
    if isinstance(param, _Tensor):
        return MODULE_NAMES.holder(steps.roots, param)
    mod = steps.spans.module_of(node)
    return "" if mod is None else MODULE_NAMES.find(steps.roots, mod)


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
    if steps.step == SETUP_STEP:
        if _in_constructor(start):
            steps.setup_ops = True
        else:
            steps.undecide()
    in_backward = _graph_task_id() != -1
    if phase_hint:
        phase = phase_hint
    elif in_backward:  # also inside optimizer.step(closure): the closure's backward
        phase = "backward"
        steps.backward_began = True
    elif inner is not None:  # a module's forward (a closure's too)
        phase = "forward"
    elif steps.forwarded and not steps.backward_began:
        phase = "forward"  # after the model's forward, before its backward: the loss
    elif steps.optimizer_depth:
        phase = "optimizer"
    else:
        return _OTHER
    if inner is None or root is None:
        return phase, backward_module(steps, start) if in_backward else ""
    return phase, MODULE_NAMES.name(root, inner)


def _in_constructor(start: FrameType | None) -> bool:
    """Whether the op comes from inside a module's ``__init__`` (DDP, DeepSpeed's engine)."""
    frame = start
    while frame is not None:
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), Module):
            return True
        frame = frame.f_back
    return False


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
