"""Phase (and step) labels from frameworks' own actions.

``torch.distributed.pipelining``: each schedule's sends and receives take the
phase of the action they carry (a stage's ``get_fwd_*_ops`` are forward, its
``get_bwd_*_ops`` backward; a batch mixing both takes its first op's, the
action just done). DeepSpeed: ``engine.backward`` is backward (ZeRO's
gradient reductions after autograd returns) and ``engine.step`` at a
gradient accumulation boundary is one optimizer step (its parameter
all-gathers inside are optimizer traffic; a step between boundaries is none); its
PipelineEngine's sends and receives of activations are forward, of
gradients backward, its gradient reductions backward and its optimizer
instruction one optimizer step.
Each is patched once its module has been imported (:func:`install`, called
at capture start, process-group start and the first forward).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from commlens.capture.context import StepTracker, thread_state
from commlens.capture.patching import patch

_PHASE_ATTR = "_commlens_phase"
_DONE: set[str] = set()
P2P_PHASES: dict[int, str] = {}
"""Phase by id() of each tensor of a batch mixing forward and backward ops, while it is issued."""


def _hinted(orig: Callable[..., Any], phase: str) -> Callable[..., Any]:
    """``orig`` run with the phase hint ``phase`` unless the caller named one."""

    def run(*args: Any, **kwargs: Any) -> Any:
        state = thread_state()
        saved = state.phase_hint
        if not saved:
            state.phase_hint = phase
        try:
            return orig(*args, **kwargs)
        finally:
            state.phase_hint = saved

    run.__wrapped__ = orig  # type: ignore[attr-defined]
    return run


def _tagging(orig: Callable[..., Any], phase: str) -> Callable[..., Any]:
    """A stage's ``get_*_ops``: the P2POps it returns carry ``phase``."""

    def ops(*args: Any, **kwargs: Any) -> Any:
        result = orig(*args, **kwargs)
        for op in result:
            setattr(op, _PHASE_ATTR, phase)
        return result

    ops.__wrapped__ = orig  # type: ignore[attr-defined]
    return ops


def _op_phases(ops: Any, desc: str | None) -> list[str]:
    """Each op's phase: its stage's tag, else the schedule's description of the batch."""
    default = ""
    if desc and "_" in desc and not ("fwd" in desc and "bwd" in desc):
        default = "backward" if desc.startswith("bwd") else "forward"
    return [str(getattr(op, _PHASE_ATTR, "") or default) for op in ops]


def _pipelining() -> None:
    from torch.distributed.pipelining import schedules, stage

    base = stage._PipelineStageBase
    for name, phase in (
        ("get_fwd_recv_ops", "forward"),
        ("get_fwd_send_ops", "forward"),
        ("get_bwd_recv_ops", "backward"),
        ("get_bwd_send_ops", "backward"),
    ):
        patch(base, name, _tagging(getattr(base, name), phase))
    orig = schedules._batch_p2p

    def batch_p2p(p2p_ops: Any, desc: str | None = None) -> Any:
        phases = _op_phases(p2p_ops, desc)
        if len(set(phases)) <= 1:
            run = _hinted(orig, phases[0]) if phases and phases[0] else orig
            return run(p2p_ops, desc=desc)
        for op, phase in zip(p2p_ops, phases, strict=True):  # read by capture.batch_p2p
            P2P_PHASES[id(op.tensor)] = phase
        try:
            return orig(p2p_ops, desc=desc)
        finally:
            for op in p2p_ops:
                P2P_PHASES.pop(id(op.tensor), None)

    patch(schedules, "_batch_p2p", batch_p2p)


def _stepping(steps: StepTracker, orig: Callable[..., Any]) -> Callable[..., Any]:
    """``orig`` as one optimizer step (what it issues is optimizer traffic)."""

    def step(*args: Any, **kwargs: Any) -> Any:
        steps._pre()
        try:
            return orig(*args, **kwargs)
        finally:
            steps._post()

    step.__name__ = getattr(orig, "__name__", "step")
    step.__wrapped__ = orig  # type: ignore[attr-defined]
    return step


def _at_boundary(steps: StepTracker, orig: Callable[..., Any]) -> Callable[..., Any]:
    """``engine.step``: optimizer traffic inside; one optimizer step only when it
    stepped the model (its ``global_steps`` moved).

    DeepSpeed's engine is stepped after every micro-batch and steps its
    optimizer only when the micro-batch closes an accumulation; a step in
    between is no training step (the next micro-batch's forward stays in it).
    """

    def step(engine: Any, *args: Any, **kwargs: Any) -> Any:
        before = getattr(engine, "global_steps", None)
        steps._pre()
        try:
            return orig(engine, *args, **kwargs)
        finally:
            if before is None or getattr(engine, "global_steps", None) != before:
                steps._post()
            else:
                steps.optimizer_depth = max(0, steps.optimizer_depth - 1)

    step.__name__ = getattr(orig, "__name__", "step")
    step.__wrapped__ = orig  # type: ignore[attr-defined]
    return step


def _deepspeed(steps: StepTracker) -> None:
    from deepspeed.runtime.engine import DeepSpeedEngine

    patch(DeepSpeedEngine, "backward", _hinted(DeepSpeedEngine.backward, "backward"))
    patch(DeepSpeedEngine, "step", _at_boundary(steps, DeepSpeedEngine.step))  # the engine step


_PIPE_PHASES = {  # DeepSpeed PipelineEngine's instructions that communicate
    "_exec_send_activations": "forward",
    "_exec_recv_activations": "forward",
    "_exec_send_grads": "backward",
    "_exec_recv_grads": "backward",
    "_exec_reduce_tied_grads": "backward",  # gradient reductions after the backward passes
    "_exec_reduce_grads": "backward",
}


def _deepspeed_pipe(steps: StepTracker) -> None:
    """DeepSpeed's pipeline schedule: each instruction's traffic takes its phase.

    The engine runs instructions through a map made when its class was
    defined, so the map is replaced too.
    """
    from deepspeed.runtime.pipe.engine import PipelineEngine

    made: dict[Any, Callable[..., Any]] = {}
    for name, phase in _PIPE_PHASES.items():
        orig = PipelineEngine.__dict__.get(name)
        if orig is not None:
            made[orig] = _hinted(orig, phase)
    orig_step = PipelineEngine.__dict__.get("_exec_optimizer_step")
    if orig_step is not None:
        made[orig_step] = _stepping(steps, _hinted(orig_step, "optimizer"))
    for orig, wrapped in made.items():
        patch(PipelineEngine, orig.__name__, wrapped)
    table = PipelineEngine.__dict__.get("_INSTRUCTION_MAP")
    if isinstance(table, dict):
        patch(PipelineEngine, "_INSTRUCTION_MAP", {k: made.get(v, v) for k, v in table.items()})


_HOOKS: dict[str, Callable[[StepTracker], None]] = {
    "torch.distributed.pipelining.schedules": lambda _steps: _pipelining(),
    "deepspeed.runtime.engine": _deepspeed,
    "deepspeed.runtime.pipe.engine": _deepspeed_pipe,
}


def install(steps: StepTracker) -> None:
    """Patch each framework above already imported and not patched yet."""
    for module, hook in _HOOKS.items():
        if module not in _DONE and module in sys.modules:
            hook(steps)
            _DONE.add(module)


def uninstall() -> None:
    """Forget what was patched (``restore_all`` undoes the patches themselves)."""
    _DONE.clear()
