"""DDP: the role of its group, and the time its buckets hold ``backward()``.

DDP's collectives (its wrap-time checks, bucket rebuilds and gradient
buckets) are issued by C++ and recorded at the c10d dispatcher
(:mod:`commlens.capture.c10d`); DDP itself is left as it is: its fused bucket
path, a user's comm hook (whose own calls the Python-API interception sees),
its numbers.

Role: its process group is noted as dp when the module is built, before its
constructor's first collective, unless the caller or the group's description
already named it.

Exposed time: at the end of a backward pass DDP's reducer waits, in C++, for
the all-reduces of its buckets (``finalize_backward``), and ``backward()``
returns only then. A hook on the first node of each backward pass queues an
engine callback that runs once the pass's computations are done, before the
reducer's own; from then until ``backward()`` returns the caller is held by
the buckets still in flight (:func:`hold_begin`, :func:`hold_end`), and that
time is their ``t_wait_ns``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from commlens.capture import wrapped
from commlens.capture.intercept import ACTIVE
from commlens.capture.patching import patch
from commlens.capture.pending import Pending
from commlens.capture.recorder import Recorder

_engine = torch.autograd.Variable._execution_engine  # type: ignore[attr-defined]


def _group_of(bound: inspect.BoundArguments) -> Any:
    """The process group a DDP constructor call names (None: the default group)."""
    args = bound.arguments
    mesh = args.get("device_mesh")
    if mesh is not None:
        return mesh.get_group()
    return args.get("process_group")


def _patch_init() -> None:
    orig_init = DDP.__init__
    signature = inspect.signature(orig_init)

    def __init__(self: DDP, *args: Any, **kwargs: Any) -> None:
        rec = ACTIVE.recorder
        if rec is not None and not rec.disabled:
            try:
                group = _group_of(signature.bind(self, *args, **kwargs))
                rec.groups.suggest_role(group, "dp")
                _HELD.on = True
            except Exception as exc:  # never break training
                rec.fail(exc)
        orig_init(self, *args, **kwargs)
        if ACTIVE.recorder is not None:
            wrapped.ddp_built(self)

    patch(DDP, "__init__", __init__)


class _Held:
    """Whether a DDP module was built under the capture (backward is then timed)."""

    on = False


_HELD = _Held()


def hold_begin(rec: Recorder, since: int) -> list[tuple[Any, Pending]]:
    """The ops read later (:meth:`Recorder.on_deferred`) issued since ``since`` and still
    in flight.

    Called where C++ starts to wait for them on the caller's behalf (DDP's
    buckets at the end of a backward pass): they are marked as waited on, to
    be written by :func:`hold_end`. Never raises.
    """
    try:
        ops = rec.ops
        ops.collect()
        with ops.lock:
            held = [
                (work, pending)
                for work, pending in ops.table.values()
                if pending.later is not None
                and pending.t_issue >= since
                and pending.t_end is None
                and not pending.done
            ]
            for _, pending in held:
                pending.waiting = True
        return held
    except Exception as exc:
        rec.fail(exc)
        return []


def hold_end(rec: Recorder, held: list[tuple[Any, Pending]], t0: int, t1: int) -> None:
    """The caller was held from ``t0`` to ``t1`` by the ops of :func:`hold_begin`: write them.

    The held time is shared out in the order the ops completed: each op's
    wait is the part of the interval from the previous one's end to its own,
    so the waits add up to the time held. Never raises.
    """
    try:
        ops = rec.ops
        ops.collect()  # completion stamps of the held ops
        start = t0
        for work, pending in sorted(held, key=lambda e: e[1].t_end or t1):
            end = min(pending.t_end or t1, t1)
            wait = max(0, end - start)
            start = max(start, end)
            ops.after_wait(work, pending, end - wait, end)
    except Exception as exc:
        rec.fail(exc)


def _hold_hook(rec: Recorder, since: int, out: list[Any]) -> Callable[..., None]:
    """A prehook on a backward pass's first node: queues the end-of-computation mark."""

    def computed() -> None:
        out.append((time.time_ns(), hold_begin(rec, since)))

    def prehook(_grad_outputs: Any) -> None:
        if not out:
            out.append(None)  # queued once per pass
            _engine.queue_callback(computed)

    return prehook


def _patch_backward() -> None:
    orig = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        rec = ACTIVE.recorder
        if rec is None or rec.disabled or not _HELD.on:
            return orig(tensors, *args, **kwargs)
        roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        node = next((t.grad_fn for t in roots if t.grad_fn is not None), None)
        if node is None:
            return orig(tensors, *args, **kwargs)
        marks: list[Any] = []
        handle = node.register_prehook(_hold_hook(rec, time.time_ns(), marks))
        try:
            return orig(tensors, *args, **kwargs)
        finally:
            t_return = time.time_ns()
            handle.remove()
            if len(marks) == 2:  # the callback ran: the pass finished its computations
                t_computed, held = marks[1]
                hold_end(rec, held, t_computed, t_return)

    patch(torch.autograd, "backward", backward)


def install() -> None:
    _patch_init()
    _patch_backward()
