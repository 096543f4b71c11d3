"""Interception of the Python ``torch.distributed`` API.

Each function of :data:`commlens.capture.extractors.EXTRACTORS` is replaced,
in both ``torch.distributed`` and ``torch.distributed.distributed_c10d``, by a
wrapper from :func:`intercepted`. A call made while another intercepted call is
running on the same thread (send → isend, all_gather_object → all_gather, the
ops inside batch_isend_irecv) is passed straight through, so every user call
is recorded exactly once. ``Work.wait`` is wrapped to time the caller's wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from sys import _getframe
from threading import get_ident as _get_ident
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from commlens.capture.context import STATES as _STATES
from commlens.capture.context import thread_state
from commlens.capture.extractors import AFTER, EXTRACTORS
from commlens.capture.ops import Call, Extractor
from commlens.capture.patching import patch

if TYPE_CHECKING:
    from commlens.capture.recorder import Recorder

_NAMESPACES = (dist, c10d)
_time_ns = time.time_ns
Work = torch._C._distributed_c10d.Work
_ExcludeKeys = torch._C._ExcludeDispatchKeyGuard

# The recorder that wrappers report to; None when no capture is active.
RECORDER: Recorder | None = None


def intercepted(name: str, orig: Callable[..., Any], extract: Extractor) -> Callable[..., Any]:
    """A stand-in for the torch.distributed function ``name`` that records each call.

    A plain closure (the cheapest thing to call); see :class:`Intercepted`
    for the functions that must compare equal to what they wrap.
    """
    after = AFTER.get(name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = RECORDER
        if rec is None or rec.disabled:
            return orig(*args, **kwargs)
        state = _STATES.get(_get_ident()) or thread_state()
        if state.depth:
            return orig(*args, **kwargs)
        try:
            call = extract(args, kwargs)
            frame = _getframe(1)
            tensor = call[9]  # ops.TENSOR, as a literal: no lookup per call
            gpu = rec.cuda.start() if rec.gpu and tensor is not None and tensor.is_cuda else None
        except Exception as exc:
            rec.fail(exc)
            return orig(*args, **kwargs)
        state.depth = 1
        try:
            t0 = _time_ns()
            if rec.below_autograd is None:
                result = orig(*args, **kwargs)
            else:
                with _ExcludeKeys(rec.below_autograd):
                    result = orig(*args, **kwargs)
            t1 = _time_ns()
        finally:
            state.depth = 0
        try:
            if after is not None:
                call = after(call, result, args, kwargs)
            rec.on_call(call, t0, t1, result, frame, state.hint, state.phase_hint, gpu)
        except Exception as exc:
            rec.fail(exc)
        return result

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = orig.__doc__
    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


class Intercepted:
    """An intercepted function that compares equal to the one it wraps.

    For ``isend``/``irecv``: ``P2POp`` checks ``op in [isend, irecv]``, and a
    caller may hold the original from before patching.
    """

    def __init__(self, name: str, orig: Callable[..., Any], extract: Extractor) -> None:
        self.orig = orig
        self.call = intercepted(name, orig, extract)
        self.__name__ = name
        self.__qualname__ = name
        self.__doc__ = orig.__doc__
        self.__wrapped__ = orig

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.orig

    def __hash__(self) -> int:
        return hash(self.orig)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


_COMPARED = ("isend", "irecv")


def _batch_isend_irecv(orig: Callable[..., Any]) -> Callable[..., Any]:
    def batch_isend_irecv(p2p_op_list: list[Any]) -> Any:
        rec = RECORDER
        state = thread_state()
        if rec is None or rec.disabled or state.depth:
            return orig(p2p_op_list)
        try:
            calls = [_p2p_call(op) for op in p2p_op_list]
            frame = _getframe(1)
        except Exception as exc:
            rec.fail(exc)
            return orig(p2p_op_list)
        state.depth = 1
        try:
            t0 = _time_ns()
            works = orig(p2p_op_list)
            t1 = _time_ns()
        finally:
            state.depth = 0
        try:
            per_op = list(works) if works is not None else []
            hint = ("batch_p2p", state.hint[1])
            for i, call in enumerate(calls):
                work = per_op[i] if len(per_op) == len(calls) else None
                rec.on_call(call, t0, t1, work, frame, hint, state.phase_hint)
        except Exception as exc:
            rec.fail(exc)
        return works

    batch_isend_irecv.__wrapped__ = orig  # type: ignore[attr-defined]
    return batch_isend_irecv


def _p2p_call(op: Any) -> Call:
    tensor, group = op.tensor, op.group
    name = getattr(op.op, "__name__", "")
    peer = int(op.peer) if op.peer is not None else None
    nbytes = tensor.nbytes
    if "send" in name:
        return ("send", group, tensor.numel(), tensor.dtype, nbytes, 0, nbytes, peer, True, tensor)
    return ("recv", group, tensor.numel(), tensor.dtype, 0, nbytes, nbytes, peer, True, tensor)


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
        rec = RECORDER
        if rec is not None:
            rec.resolve_deferred()  # ops still to be written need their group's ranks
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
            make = Intercepted if name in _COMPARED else intercepted
            wrappers[name] = make(name, orig, extract)
    wrappers["batch_isend_irecv"] = _batch_isend_irecv(c10d.batch_isend_irecv)
    wrappers["init_process_group"] = _init_hook(c10d.init_process_group, on_init)
    wrappers["destroy_process_group"] = _destroy_hook(c10d.destroy_process_group, on_destroy)
    for namespace in _NAMESPACES:
        for name, wrapper in wrappers.items():
            if hasattr(namespace, name):
                patch(namespace, name, wrapper)
    patch(Work, "wait", _wait(Work.wait))
