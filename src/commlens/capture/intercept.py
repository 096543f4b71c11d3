"""The one path of an intercepted call, and the capture it reports to.

Every interception (:mod:`~commlens.capture.python`,
:mod:`~commlens.capture.batch_p2p`, :mod:`~commlens.capture.functional`,
:mod:`~commlens.capture.c10d`: the values of the events' ``api`` column) is a
stand-in made by :func:`intercept`. It reads what the call moves before
handing it on (an *extractor*), times it, and gives the result to a
recorder's method (a *record* step). A call made while another intercepted
call runs on the same thread (send → isend, all_gather_object → all_gather,
the ops inside batch_isend_irecv) is handed on unrecorded, so every user call
is recorded exactly once. Any error while recording stops the capture
(:meth:`Recorder.fail`); the call itself always runs, with the caller's
arguments.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from sys import _getframe
from threading import get_ident as _get_ident
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from commlens.capture.context import STATES as _STATES
from commlens.capture.context import thread_state

if TYPE_CHECKING:
    from commlens.capture.pending import Pending, PendingOps
    from commlens.capture.recorder import Recorder
    from commlens.capture.session import Capture

# What one intercepted call moves, as a plain tuple (the cheapest thing to build per call):
# (op, group, count, dtype, bytes_in, bytes_out, size_bytes, peer, is_async, tensor)
# dtype is a torch.dtype (named once per event kind) or a name; size_bytes is S
# (conventions §3); peer is the global peer or root, or None; tensor is the
# one whose device decides how the call is timed, or None.
Intercepted = tuple[str, Any, int, Any, int, int, int, "int | None", bool, "torch.Tensor | None"]
TENSOR = 9  # index of the tensor in an Intercepted
# An extractor: the caller's (args, kwargs) -> what the record step takes.
Extractor = Callable[[tuple[Any, ...], dict[str, Any]], Any]
# A step after the call for what is known only then: (call, result, args, kwargs) -> call.
After = Callable[[Intercepted, Any, tuple[Any, ...], dict[str, Any]], Intercepted]
# A record step: (recorder, extracted, t_issue, t_return, result, frame, api, phase_hint,
# gpu_token). Recorder.on_call is one.
Record = Callable[["Recorder", Any, int, int, Any, "FrameType | None", str, str, Any], Any]
# The two halves of a timed wait: (the recorder's ops, waited) -> the op it completes, or
# None; (ops, waited, op, t0, t1). PendingOps.before_wait and after_wait are a pair.
BeforeWait = Callable[["PendingOps", Any], "Pending | None"]
AfterWait = Callable[["PendingOps", Any, "Pending", int, int], None]

_time_ns = time.time_ns


def _run_as_is(code: Any) -> None:
    """Under torch.compile, a frame of ``code`` and every frame below it run as they are.

    The capture's stand-ins are entered as frames while Dynamo's frame hook is
    on: after a graph break in a compiled region, or from C++ (the c10d
    kernel, issued by DDP's forward inside a compiled model). Dynamo would
    compile them, and fail on their reading of frames and modules; a
    strategy set on the code object costs a call nothing.
    """
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except ImportError:  # a torch without Dynamo's frame strategies
        return
    set_code_exec_strategy(code, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))


_ExcludeKeys = torch._C._ExcludeDispatchKeyGuard


class ActiveCapture:
    """The capture active in this process (at most one) and its recorder.

    ``recorder`` is set once the capture's interceptions are all in place and
    cleared when it stops: every interception reads it on each call.
    """

    __slots__ = ("capture", "recorder")

    def __init__(self) -> None:
        self.capture: Capture | None = None
        self.recorder: Recorder | None = None


ACTIVE = ActiveCapture()


def intercept(
    orig: Callable[..., Any],
    extract: Extractor,
    record: Record,
    *,
    api: str,
    after: After | None = None,
    tensor_at: int | None = None,
    below_autograd: bool = True,
    positional: bool = False,
) -> Callable[..., Any]:
    """A stand-in for ``orig`` that records each call through ``record``.

    ``tensor_at``: where in the extracted value the tensor is whose device
    decides the timing (a CUDA tensor's call is timed by CUDA events; None:
    never). ``below_autograd``: while the c10d kernel is registered
    (:mod:`commlens.capture.c10d`), the call runs with the autograd keys
    excluded, so it does not pass through that kernel as well.
    ``positional``: ``extract`` reads positions only; a call with keyword
    arguments is handed on unrecorded.

    The hot path of the capture, in one frame: a plain closure whose
    settings are free variables, the cheapest thing to call.
    """
    holder = ACTIVE

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = holder.recorder
        if rec is None or rec.disabled:
            return orig(*args, **kwargs)
        state = _STATES.get(_get_ident()) or thread_state()
        if state.depth or (kwargs and positional):
            return orig(*args, **kwargs)
        try:
            call = extract(args, kwargs)
            frame = _getframe(1)
            gpu = None
            if rec.gpu and tensor_at is not None:
                tensor = call[tensor_at]
                if tensor is not None and tensor.is_cuda:
                    gpu = rec.cuda.start()
        except Exception as exc:
            rec.fail(exc)
            return orig(*args, **kwargs)
        state.depth = 1
        try:
            t0 = _time_ns()
            state.inflight = (call, frame, t0)
            if rec.below_autograd is None or not below_autograd:
                result = orig(*args, **kwargs)
            else:
                with _ExcludeKeys(rec.below_autograd):
                    result = orig(*args, **kwargs)
            t1 = _time_ns()
            state.inflight = None
        except BaseException as exc:  # the op failed: kept in flight, with why
            state.inflight = (call, frame, t0, f"{type(exc).__name__}: {exc}"[:300])
            raise
        finally:
            state.depth = 0
        try:
            if after is not None:
                call = after(call, result, args, kwargs)
            record(rec, call, t0, t1, result, frame, api, state.phase_hint, gpu)
        except Exception as exc:
            rec.fail(exc)
        return result

    _run_as_is(wrapper.__code__)
    wrapper.__name__ = wrapper.__qualname__ = getattr(orig, "__name__", api)
    wrapper.__doc__ = orig.__doc__
    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


def timed_wait(
    orig: Callable[..., Any], before: BeforeWait, after: AfterWait
) -> Callable[..., Any]:
    """A stand-in for a wait (``Work.wait``, ``wait_tensor``) that times it.

    Only a wait for an op the recorder holds (``before`` finds it) is timed,
    and handed to ``after``: a blocking collective's own wait inside the call
    costs one dict test.
    """
    holder = ACTIVE

    def wait(target: Any, *args: Any, **kwargs: Any) -> Any:
        rec = holder.recorder
        if rec is None:
            return orig(target, *args, **kwargs)
        ops = rec.ops
        pending = before(ops, target)
        if pending is None:
            return orig(target, *args, **kwargs)
        t0 = _time_ns()
        try:
            return orig(target, *args, **kwargs)
        finally:
            after(ops, target, pending, t0, _time_ns())

    _run_as_is(wait.__code__)
    wait.__wrapped__ = orig  # type: ignore[attr-defined]
    return wait


T = TypeVar("T")


def calling(cls: type[T], call: Callable[..., Any]) -> type[T]:
    """A subclass of ``cls`` whose instances, called, run ``call`` itself.

    For stand-ins that must be objects (to compare equal to what they wrap,
    or to pass attributes on): ``call`` is their ``__call__`` as a static
    method, so a call costs no frame of its own.
    """
    return type(cls.__name__, (cls,), {"__call__": staticmethod(call)})
