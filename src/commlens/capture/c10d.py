"""All-reduces issued from C++, seen where every collective passes: the c10d
dispatcher (events with ``api`` "c10d").

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

from types import FrameType
from typing import Any

import torch

from commlens.capture.intercept import Intercepted, intercept
from commlens.capture.patching import change
from commlens.capture.recorder import Recorder

_ProcessGroup = torch._C._distributed_c10d.ProcessGroup
_Work = torch._C._distributed_c10d.Work
_KEYS = ("AutogradCPU", "AutogradCUDA")
_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.AutogradCUDA
)
API = "c10d"  # the role comes from the group


def _intercepted(tensors: list[torch.Tensor], group: Any) -> Intercepted:
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


def _extract(args: tuple[Any, ...], _kwargs: dict[str, Any]) -> tuple[Any, ...]:
    # (keyset, tensors, group, ...): what is needed now; the call is read afterwards.
    return (args[1][0], args[1], args[2])


def _record(
    rec: Recorder,
    noted: tuple[Any, ...],
    t_issue: int,
    t_return: int,
    out: Any,
    frame: FrameType | None,
    api: str,
    phase_hint: str,
    gpu: Any,
) -> None:
    _, tensors, group = noted
    work = _Work.unbox(out[1])
    if gpu is None:  # read later, with the completed ops (Recorder.on_deferred)
        make = lambda: _intercepted(tensors, group)  # noqa: E731
        rec.on_deferred(make, t_issue, work, frame, api, phase_hint)
    else:
        call = _intercepted(tensors, group)
        rec.on_call(call, t_issue, t_return, work, frame, api, phase_hint, gpu)


def _kernel(op: Any) -> Any:
    below = torch._C._after_autograd_keyset
    redispatch = op.redispatch

    def allreduce_(keyset: Any, *args: Any) -> Any:
        return redispatch(keyset & below, *args)

    # Called between DDP's backward computations: it does the least it can
    # before handing the call on.
    return intercept(allreduce_, _extract, _record, api=API, tensor_at=0, below_autograd=False)


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
