"""Functional collectives (DTensor tensor parallelism, forward and backward).

DTensor and ``torch.distributed._functional_collectives`` issue their
communication as ``torch.ops._c10d_functional.<op>(...)`` looked up on the op
namespace at call time, in forward and in the autograd backward of
redistributions alike. Replacing those namespace attributes is the narrowest
mechanism that sees them all: nothing else is intercepted (a dispatch mode
would see every aten op). The op returns at once; completion is the
``wait_tensor`` on its output.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed.distributed_c10d as c10d

from commlens.capture.context import ThreadState, thread_state
from commlens.capture.ops import Call
from commlens.capture.patching import patch
from commlens.capture.recorder import Pending

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder

_time_ns = time.time_ns


_GROUPS: dict[Any, Any] = {}


def _group(name: Any) -> Any:
    """The process group of a functional op's group name (resolved once per name)."""
    group = _GROUPS.get(name)
    if group is None:
        group = _GROUPS[name] = c10d._resolve_process_group(name)
    return group


def _single(op: str, t: torch.Tensor, group_name: Any, size: int, out: int) -> Call:
    return (op, _group(group_name), t.numel(), t.dtype, t.nbytes, out, size, None, True, t)


def _all_reduce(a: tuple[Any, ...]) -> Call:
    n = a[0].nbytes
    return _single("all_reduce", a[0], a[2], n, n)


def _all_gather(a: tuple[Any, ...]) -> Call:
    total = a[0].nbytes * int(a[1])
    return _single("all_gather", a[0], a[2], total, total)


def _reduce_scatter(a: tuple[Any, ...]) -> Call:
    n = a[0].nbytes
    return _single("reduce_scatter", a[0], a[3], n, n // max(1, int(a[2])))


def _all_to_all(a: tuple[Any, ...]) -> Call:
    n = a[0].nbytes
    return _single("all_to_all", a[0], a[3], n, n)


def _broadcast(a: tuple[Any, ...]) -> Call:
    t, n = a[0], a[0].nbytes
    return ("broadcast", _group(a[2]), t.numel(), t.dtype, n, n, n, int(a[1]), True, t)


def _coalesced(op: str, group_at: int, size_at: int | None) -> Any:
    def extract(a: tuple[Any, ...]) -> Call:
        ts = list(a[0])
        b_in = sum(t.nbytes for t in ts)
        n = b_in * int(a[size_at or 1]) if op == "all_gather" else b_in
        count = sum(t.numel() for t in ts)
        return (op, _group(a[group_at]), count, ts[0].dtype, b_in, n, n, None, True, ts[0])

    return extract


_EXTRACT = {
    "all_reduce": _all_reduce,
    "all_reduce_": _all_reduce,
    "all_gather_into_tensor": _all_gather,
    "reduce_scatter_tensor": _reduce_scatter,
    "all_to_all_single": _all_to_all,
    "broadcast": _broadcast,
    "all_reduce_coalesced": _coalesced("all_reduce", 2, None),
    "all_gather_into_tensor_coalesced": _coalesced("all_gather", 2, 1),
    "reduce_scatter_tensor_coalesced": _coalesced("reduce_scatter", 3, None),
}


class FunctionalOp:
    """Stands in for one op packet: records the call, forwards attributes."""

    def __init__(self, packet: Any, extract: Any, state: _FuncolState) -> None:
        self._packet = packet
        self._extract = extract
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._packet, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rec = self._state.recorder
        state = thread_state()
        if rec is None or rec.disabled or state.depth or kwargs:
            return self._packet(*args, **kwargs)
        try:
            call = self._extract(args)
            frame = sys._getframe(1)
        except Exception as exc:
            rec.fail(exc)
            return self._packet(*args)
        state.depth = 1  # the c10d call inside is this one, not another
        try:
            t0 = _time_ns()
            if rec.below_autograd is None:
                out = self._packet(*args)
            else:
                with torch._C._ExcludeDispatchKeyGuard(rec.below_autograd):
                    out = self._packet(*args)
        finally:
            state.depth = 0
        try:
            self._state.issued(rec, call, t0, out, frame, state)
        except Exception as exc:
            rec.fail(exc)
        return out


class _FuncolState:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder: Recorder | None = recorder
        self.pending: dict[int, tuple[Any, Pending]] = {}

    def issued(
        self, rec: Recorder, call: Call, t0: int, out: Any, frame: Any, state: ThreadState
    ) -> None:
        hint = ("functional", state.hint[1])
        head = rec.on_call(call, t0, t0, None, frame, hint, state.phase_hint, defer=True)
        if head is None:
            return
        pending = Pending(head, rec.steps.step, t0)
        for tensor in out if isinstance(out, (list, tuple)) else [out]:
            self.pending[id(tensor)] = (tensor, pending)

    def waited(self, tensor: Any, t0: int, t1: int) -> None:
        entry = self.pending.pop(id(tensor), None)
        rec = self.recorder
        if entry is None or entry[0] is not tensor or rec is None:
            return
        pending = entry[1]
        if pending.done:
            return
        pending.t_end = t1
        pending.wait_ns = t1 - t0
        rec._safe_emit(pending)

    def close(self) -> None:
        rec = self.recorder
        if rec is not None:
            for _, pending in self.pending.values():
                rec._emit(pending, force=True)
        self.pending.clear()
        self.recorder = None


def install(recorder: Recorder) -> _FuncolState:
    _GROUPS.clear()  # names are reused by new process groups across captures
    state = _FuncolState(recorder)
    namespace = torch.ops._c10d_functional
    for name, extract in _EXTRACT.items():
        packet = getattr(namespace, name, None)
        if packet is not None:
            patch(namespace, name, FunctionalOp(packet, extract, state))
    wait_packet = namespace.wait_tensor

    class WaitTensor:
        def __getattr__(self, name: str) -> Any:
            return getattr(wait_packet, name)

        def __call__(self, tensor: Any, *args: Any) -> Any:
            if state.recorder is None or id(tensor) not in state.pending:
                return wait_packet(tensor, *args)
            t0 = _time_ns()
            result = wait_packet(tensor, *args)
            try:
                state.waited(tensor, t0, _time_ns())
            except Exception as exc:
                state.recorder.fail(exc)
            return result

    patch(namespace, "wait_tensor", WaitTensor())
    return state
