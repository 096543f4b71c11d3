"""Every c10d op, seen where every collective passes: the c10d dispatcher
(events with ``api`` "c10d").

Code that bypasses the Python API reaches the backend through the
dispatcher's ``c10d::`` ops: DDP's reducer (its bucket all-reduces, its
wrap-time parameter checks, its bucket-rebuild broadcasts), a user's C++
extension, ``torch.ops.c10d.*`` or a ``ProcessGroup`` method called
directly. A kernel for each op of :data:`OPS` on the autograd keys (which run
before the backend's) records those calls and hands each on unchanged, so
DDP keeps its own fused path (and its numbers) with or without a user comm
hook. It is registered from the moment the capture starts, so the
collectives DDP issues from its constructor are seen too.

The calls the Python-API interception records pass through the dispatcher as
well: they run with the autograd keys excluded
(:data:`Recorder.below_autograd`), skip the kernel and are recorded once.
Which costs a Python call one dispatch-key guard, not the kernel's tens of
microseconds.

Between a backward pass's computations the recorder's code runs with cold
caches, several times slower than in a loop (about 110 µs of CPU per bucket,
against 5 µs warm, in the benchmark's DDP job). So the kernel notes only what
cannot wait (where and when the call was issued, its completion callback) and
the call's sizes and group are read with the next batch of completed ops
(:meth:`Recorder.on_deferred`): about 60 µs per bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from commlens.capture.groups import global_rank
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

# An op's arguments (after the dispatch keyset) -> what the call moves.
Reader = Callable[[tuple[Any, ...]], Intercepted]


def _nbytes(ts: Sequence[torch.Tensor]) -> int:
    return sum(t.nbytes for t in ts)


def _numel(ts: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() for t in ts)


def _flat(lists: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    return [t for ts in lists for t in ts]


def _group(a: tuple[Any, ...], i: int) -> Any:
    return _ProcessGroup.unbox(a[i])


def _async(a: tuple[Any, ...], i: int) -> bool:
    return bool(a[i]) if i < len(a) else True


def _call(
    op: str, group: Any, ins: Sequence[torch.Tensor], b_out: int, size: int,
    peer: int | None, is_async: bool, timed: torch.Tensor | None,
) -> Intercepted:  # fmt: skip
    dtype = ins[0].dtype if ins else ""
    return (op, group, _numel(ins), dtype, _nbytes(ins), b_out, size, peer, is_async, timed)


def _list_in_place(op: str, async_at: int, root_at: int | None = None) -> Reader:
    """Ops on one list of tensors, in place: all-reduce, broadcast, reduce."""

    def read(a: tuple[Any, ...]) -> Intercepted:
        ts, group = a[0], _group(a, 1)
        n = _nbytes(ts)
        root = None if root_at is None else global_rank(group, int(a[root_at]))
        return _call(op, group, ts, n, n, root, _async(a, async_at), ts[0] if ts else None)

    return read


def _gather_lists(a: tuple[Any, ...]) -> Intercepted:
    # allgather_(outputs[][], inputs[]) and allgather_coalesced_(outputs[][], inputs[])
    outs, ins, group = _flat(a[0]), a[1], _group(a, 2)
    n = _nbytes(outs)
    return _call("all_gather", group, ins, n, n, None, _async(a, 3), ins[0] if ins else None)


def _gather_tensors(a: tuple[Any, ...]) -> Intercepted:
    # _allgather_base_(output, input) and allgather_into_tensor_coalesced_(outputs[], inputs[])
    outs, ins = (a[0], a[1]) if isinstance(a[0], list) else ([a[0]], [a[1]])
    n = _nbytes(outs)
    return _call("all_gather", _group(a, 2), ins, n, n, None, _async(a, 3), ins[0])


def _scatter_lists(a: tuple[Any, ...]) -> Intercepted:
    # reduce_scatter_(outputs[], inputs[][])
    outs, ins = a[0], _flat(a[1])
    n = _nbytes(ins)
    return _call("reduce_scatter", _group(a, 2), ins, _nbytes(outs), n, None, _async(a, 4), outs[0])


def _scatter_tensors(a: tuple[Any, ...]) -> Intercepted:
    # _reduce_scatter_base_(output, input) and reduce_scatter_tensor_coalesced_(outputs, inputs)
    outs, ins = (a[0], a[1]) if isinstance(a[0], list) else ([a[0]], [a[1]])
    n = _nbytes(ins)
    return _call("reduce_scatter", _group(a, 2), ins, _nbytes(outs), n, None, _async(a, 4), outs[0])


def _gather(a: tuple[Any, ...]) -> Intercepted:
    # gather_(outputs[][], inputs[], group, root): S is the whole gathered buffer.
    outs, ins, group = _flat(a[0]), a[1], _group(a, 2)
    root = global_rank(group, int(a[3]))
    size = _nbytes(ins) * int(dist.get_world_size(group))
    return _call("gather", group, ins, _nbytes(outs), size, root, _async(a, 4), ins[0])


def _scatter(a: tuple[Any, ...]) -> Intercepted:
    # scatter_(outputs[], inputs[][], group, root)
    outs, ins, group = a[0], _flat(a[1]), _group(a, 2)
    root = global_rank(group, int(a[3]))
    size = _nbytes(outs) * int(dist.get_world_size(group))
    count, dtype = _numel(outs), outs[0].dtype
    return ("scatter", group, count, dtype, _nbytes(ins), _nbytes(outs), size, root,
            _async(a, 4), outs[0])  # fmt: skip


def _all_to_all(a: tuple[Any, ...]) -> Intercepted:
    # alltoall_(outputs[], inputs[]) and alltoall_base_(output, input, ...)
    outs, ins = (a[0], a[1]) if isinstance(a[0], list) else ([a[0]], [a[1]])
    async_at = 3 if isinstance(a[0], list) else 5
    n = _nbytes(ins)
    return _call("all_to_all", _group(a, 2), ins, _nbytes(outs), n, None, _async(a, async_at),
                 ins[0])  # fmt: skip


def _barrier(a: tuple[Any, ...]) -> Intercepted:
    return ("barrier", _group(a, 1), 0, "", 0, 0, 0, None, _async(a, 3), None)


def _p2p(op: str, peer_at: int | None) -> Reader:
    def read(a: tuple[Any, ...]) -> Intercepted:
        ts, group = a[0], _group(a, 1)
        n = _nbytes(ts)
        peer = None if peer_at is None else global_rank(group, int(a[peer_at]))
        b_in, b_out = (n, 0) if op == "send" else (0, n)
        return (op, group, _numel(ts), ts[0].dtype, b_in, b_out, n, peer, True, ts[0])

    return read


# c10d op -> how to read what it moves (conventions §3: count is the rank's own input).
OPS: dict[str, Reader] = {
    "allreduce_": _list_in_place("all_reduce", 4),
    "allreduce_coalesced_": _list_in_place("all_reduce", 3),
    "allgather_": _gather_lists,
    "allgather_coalesced_": _gather_lists,
    "_allgather_base_": _gather_tensors,
    "allgather_into_tensor_coalesced_": _gather_tensors,
    "reduce_scatter_": _scatter_lists,
    "_reduce_scatter_base_": _scatter_tensors,
    "reduce_scatter_tensor_coalesced_": _scatter_tensors,
    "broadcast_": _list_in_place("broadcast", 4, root_at=2),
    "reduce_": _list_in_place("reduce", 5, root_at=3),
    "gather_": _gather,
    "scatter_": _scatter,
    "alltoall_": _all_to_all,
    "alltoall_base_": _all_to_all,
    "barrier": _barrier,
    "send": _p2p("send", 2),
    "recv_": _p2p("recv", 2),
    "recv_any_source_": _p2p("recv", None),
}


def _timed_tensor(value: Any) -> Any:
    """The first tensor of an argument (a tensor, a list or a list of lists), or None."""
    while isinstance(value, list):
        if not value:
            return None
        value = value[0]
    return value if isinstance(value, torch.Tensor) else None


def _work(out: Any) -> Any:
    """The Work an op returned (alone or after its tensors), or None."""
    if isinstance(out, tuple):
        out = out[-1] if out else None
    return None if out is None else _Work.unbox(out)


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
    _, read, args = noted
    work = _work(out)
    if gpu is None and work is not None:  # read later, with the completed ops
        make = lambda: read(args)  # noqa: E731
        rec.on_deferred(make, t_issue, work, frame, api, phase_hint)
    else:
        rec.on_call(read(args), t_issue, t_return, work, frame, api, phase_hint, gpu)


def _kernel(name: str, read: Reader) -> Any:
    op = getattr(torch.ops.c10d, name).default
    below = torch._C._after_autograd_keyset
    redispatch = op.redispatch

    def kernel(keyset: Any, *args: Any) -> Any:
        return redispatch(keyset & below, *args)

    def extract(args: tuple[Any, ...], _kwargs: dict[str, Any]) -> tuple[Any, ...]:
        # (keyset, op's arguments): what is needed now; the call is read afterwards.
        return (_timed_tensor(args[1]), read, args[1:])

    kernel.__name__ = name
    # Called between DDP's backward computations: it does the least it can
    # before handing the call on.
    return intercept(kernel, extract, _record, api=API, tensor_at=0, below_autograd=False)


def install(rec: Recorder) -> None:
    """Register the kernels until :func:`commlens.capture.patching.restore_all`."""
    if rec.below_autograd is not None or rec.disabled:
        return  # registered already, or nothing to record
    holder: list[Any] = []
    kernels = {
        name: _kernel(name, read) for name, read in OPS.items() if hasattr(torch.ops.c10d, name)
    }

    def do() -> None:
        lib = torch.library.Library("c10d", "IMPL")  # an override, by design
        for name, kernel in kernels.items():
            for key in _KEYS:
                lib.impl(name, kernel, key, with_keyset=True)
        holder.append(lib)
        rec.below_autograd = _KEYSET

    def undo() -> None:
        rec.below_autograd = None
        while holder:
            holder.pop()._destroy()

    change(do, undo)
