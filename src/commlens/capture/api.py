"""Interception of the Python ``torch.distributed`` API.

Each function of :data:`commlens.capture.ops.EXTRACTORS` is replaced, in both
``torch.distributed`` and ``torch.distributed.distributed_c10d``, by a
:class:`Intercepted` wrapper. A call made while another intercepted call is
running on the same thread (send → isend, all_gather_object → all_gather, the
ops inside batch_isend_irecv) is passed straight through, so every user call
is recorded exactly once. ``Work.wait`` is wrapped to time the caller's wait.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from commlens.capture.context import TLS
from commlens.capture.extractors import EXTRACTORS
from commlens.capture.ops import Call, dtype_name
from commlens.capture.patching import patch

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder

_NAMESPACES = (dist, c10d)
_time_ns = time.time_ns
Work = torch._C._distributed_c10d.Work

# The recorder that wrappers report to; None when no capture is active.
RECORDER: Recorder | None = None


class Intercepted:
    """A stand-in for one torch.distributed function that records each call.

    It compares equal to the function it wraps, so checks such as
    ``op in [isend, irecv]`` keep working for objects made before patching.
    """

    def __init__(self, name: str, orig: Callable[..., Any], extract: Callable[..., Call]) -> None:
        self.orig = orig
        self.extract = extract
        self.__name__ = name
        self.__qualname__ = name
        self.__doc__ = orig.__doc__
        self.__wrapped__ = orig

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.orig

    def __hash__(self) -> int:
        return hash(self.orig)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rec = RECORDER
        tls = TLS
        if rec is None or rec.disabled or tls.depth:
            return self.orig(*args, **kwargs)
        try:
            call = self.extract(args, kwargs)
            frame = sys._getframe(1)
            tensor = call.tensor
            gpu = rec.cuda.start() if tensor is not None and tensor.is_cuda else None
        except Exception as exc:
            rec.fail(exc)
            return self.orig(*args, **kwargs)
        tls.depth = 1
        try:
            t0 = _time_ns()
            result = self.orig(*args, **kwargs)
            t1 = _time_ns()
        finally:
            tls.depth = 0
        try:
            if call.after is not None:
                call.after(call, result, args, kwargs)
            rec.on_call(call, t0, t1, result, frame, tls.api, tls.role_hint, gpu)
        except Exception as exc:
            rec.fail(exc)
        return result


def _batch_isend_irecv(orig: Callable[..., Any]) -> Callable[..., Any]:
    def batch_isend_irecv(p2p_op_list: list[Any]) -> Any:
        rec = RECORDER
        if rec is None or rec.disabled or TLS.depth:
            return orig(p2p_op_list)
        try:
            calls = [_p2p_call(op) for op in p2p_op_list]
            frame = sys._getframe(1)
        except Exception as exc:
            rec.fail(exc)
            return orig(p2p_op_list)
        TLS.depth = 1
        try:
            t0 = _time_ns()
            works = orig(p2p_op_list)
            t1 = _time_ns()
        finally:
            TLS.depth = 0
        try:
            per_op = list(works) if works is not None else []
            for i, call in enumerate(calls):
                work = per_op[i] if len(per_op) == len(calls) else None
                rec.on_call(call, t0, t1, work, frame, "batch_p2p", TLS.role_hint)
        except Exception as exc:
            rec.fail(exc)
        return works

    batch_isend_irecv.__wrapped__ = orig  # type: ignore[attr-defined]
    return batch_isend_irecv


def _p2p_call(op: Any) -> Call:
    tensor, group = op.tensor, op.group
    name = getattr(op.op, "__name__", "")
    peer = int(op.peer) if op.peer is not None else None
    nbytes = int(tensor.numel()) * int(tensor.element_size())
    is_send = "send" in name
    return Call(
        "send" if is_send else "recv",
        group,
        int(tensor.numel()),
        dtype_name(tensor.dtype),
        nbytes if is_send else 0,
        0 if is_send else nbytes,
        nbytes,
        peer,
        True,
        tensor,
    )


def _wait(orig: Callable[..., Any]) -> Callable[..., Any]:
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec = RECORDER
        # Blocking collectives wait inside the call: nothing is pending then.
        if rec is None or not rec._pending:
            return orig(self, *args, **kwargs)
        pending = rec.before_wait(self)
        if pending is None:
            return orig(self, *args, **kwargs)
        t0 = _time_ns()
        try:
            return orig(self, *args, **kwargs)
        finally:
            rec.after_wait(self, pending, t0, _time_ns())

    wait.__wrapped__ = orig  # type: ignore[attr-defined]
    return wait


def _init_hook(orig: Callable[..., Any], after: Callable[[], None]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = orig(*args, **kwargs)
        after()
        return result

    init_process_group.__wrapped__ = orig  # type: ignore[attr-defined]
    return init_process_group


def _destroy_hook(orig: Callable[..., Any], before: Callable[[], None]) -> Callable[..., Any]:
    def destroy_process_group(group: Any = None) -> Any:
        if group is None or group is dist.group.WORLD:
            before()
        return orig(group)

    destroy_process_group.__wrapped__ = orig  # type: ignore[attr-defined]
    return destroy_process_group


def install(on_init: Callable[[], None], on_destroy: Callable[[], None]) -> None:
    """Patch torch.distributed; idempotent only through :func:`uninstall`."""
    wrappers: dict[str, Any] = {}
    for name, extract in EXTRACTORS.items():
        orig = getattr(c10d, name, None) or getattr(dist, name, None)
        if orig is not None:
            wrappers[name] = Intercepted(name, orig, extract)
    wrappers["batch_isend_irecv"] = _batch_isend_irecv(c10d.batch_isend_irecv)
    wrappers["init_process_group"] = _init_hook(c10d.init_process_group, on_init)
    wrappers["destroy_process_group"] = _destroy_hook(c10d.destroy_process_group, on_destroy)
    for namespace in _NAMESPACES:
        for name, wrapper in wrappers.items():
            if hasattr(namespace, name):
                patch(namespace, name, wrapper)
    patch(Work, "wait", _wait(Work.wait))
