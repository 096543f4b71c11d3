"""All-reduces issued from C++, seen where every collective passes: the c10d dispatcher.

DDP's reducer all-reduces its gradient buckets in C++, never through the
Python API. A kernel for ``c10d::allreduce_`` on the autograd keys (which
run before the backend's) records those calls and hands each on unchanged,
so DDP keeps its own fused path (and its numbers) with or without a user
comm hook.

Between a backward pass's computations the recorder's code runs with cold
caches, several times slower than in a loop (about 110 µs of CPU per bucket,
against 5 µs warm, in the benchmark's DDP job). So the kernel notes only what
cannot wait (where and when the call was issued, its completion callback) and
the call's sizes and group are read with the next batch of completed ops
(:meth:`Recorder.on_deferred`): about 60 µs per bucket.

A Python kernel on the dispatcher costs every all-reduce tens of
microseconds, so it is registered only once a DDP module runs, and while it
is, the intercepted Python calls run with the autograd keys excluded
(:data:`Recorder.below_autograd`): they skip the kernel and are recorded once,
by the Python-API interception.
"""

from __future__ import annotations

import time
from sys import _getframe
from threading import get_ident as _get_ident
from typing import TYPE_CHECKING, Any

import torch

from commlens.capture import api
from commlens.capture.context import STATES as _STATES
from commlens.capture.context import thread_state
from commlens.capture.ops import Call
from commlens.capture.patching import change

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder

_ProcessGroup = torch._C._distributed_c10d.ProcessGroup
_Work = torch._C._distributed_c10d.Work
_time_ns = time.time_ns
_KEYS = ("AutogradCPU", "AutogradCUDA")
_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.AutogradCUDA
)
HINT = ("c10d", "")  # api of these events; the role comes from the group


def _call(tensors: list[torch.Tensor], group: Any) -> Call:
    """What an ``allreduce_`` call moves (its tensors, and its group as passed to the kernel)."""
    first = tensors[0]
    if len(tensors) == 1:
        nbytes, count = first.nbytes, first.numel()
    else:
        nbytes, count = sum(t.nbytes for t in tensors), sum(t.numel() for t in tensors)
    return (
        "all_reduce", _ProcessGroup.unbox(group), count, first.dtype, nbytes, nbytes, nbytes,
        None, True, first,
    )  # fmt: skip


def _kernel(op: Any) -> Any:
    below = torch._C._after_autograd_keyset
    redispatch = op.redispatch

    def allreduce_(keyset: Any, *args: Any) -> Any:
        # Called between DDP's backward computations, so it does the least
        # it can before handing the call on; the call is read afterwards.
        rec = api.RECORDER
        state = _STATES.get(_get_ident()) or thread_state()
        if rec is None or rec.disabled or state.depth:
            return redispatch(keyset & below, *args)
        try:
            gpu = rec.cuda.start() if rec.gpu and args[0][0].is_cuda else None
        except Exception as exc:
            rec.fail(exc)
            return redispatch(keyset & below, *args)
        state.depth = 1
        try:
            t0 = _time_ns()
            out = redispatch(keyset & below, *args)
            t1 = _time_ns()
        finally:
            state.depth = 0
        try:
            tensors, group, work, frame = args[0], args[1], _Work.unbox(out[1]), _getframe(1)
            if gpu is None:  # read later, with the completed ops (Recorder.on_deferred)
                make = lambda: _call(tensors, group)  # noqa: E731
                rec.on_deferred(make, t0, work, frame, HINT, state.phase_hint)
            else:
                call = _call(tensors, group)
                rec.on_call(call, t0, t1, work, frame, HINT, state.phase_hint, gpu)
        except Exception as exc:
            rec.fail(exc)
        return out

    return allreduce_


def install(rec: Recorder) -> None:
    """Register the kernel (once) until :func:`commlens.capture.patching.restore_all`."""
    if rec.below_autograd is not None or rec.disabled:
        return  # registered already, or nothing to record
    holder: list[Any] = []

    def do() -> None:
        lib = torch.library.Library("c10d", "IMPL")  # an override, by design
        kernel = _kernel(torch.ops.c10d.allreduce_.default)
        for key in _KEYS:
            lib.impl("allreduce_", kernel, key, with_keyset=True)
        holder.append(lib)
        rec.below_autograd = _KEYSET

    def undo() -> None:
        rec.below_autograd = None
        while holder:
            holder.pop()._destroy()

    change(do, undo)
