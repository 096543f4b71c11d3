"""Interception of the Python ``torch.distributed`` API (events with ``api`` "python").

Each function of :data:`commlens.capture.extractors.EXTRACTORS` is replaced,
in both ``torch.distributed`` and ``torch.distributed.distributed_c10d``, by
its :func:`~commlens.capture.intercept.intercept` stand-in;
``batch_isend_irecv`` by :mod:`commlens.capture.batch_p2p`'s. ``Work.wait``
is wrapped (:func:`~commlens.capture.intercept.timed_wait`) to time the
caller's wait for an async op.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from commlens.capture import batch_p2p
from commlens.capture import c10d as c10d_kernels
from commlens.capture.extractors import AFTER, EXTRACTORS
from commlens.capture.intercept import ACTIVE, TENSOR, calling, intercept, timed_wait
from commlens.capture.patching import patch
from commlens.capture.pending import PendingOps
from commlens.capture.recorder import Recorder

_NAMESPACES = (dist, c10d)
Work = torch._C._distributed_c10d.Work
API = "python"


class StandIn:
    """An intercepted function that compares equal to the one it wraps.

    For ``isend``/``irecv``: ``P2POp`` checks ``op in [isend, irecv]``, and a
    caller may hold the original from before patching.
    """

    def __init__(self, orig: Callable[..., Any]) -> None:
        self.orig = orig
        self.__name__ = self.__qualname__ = orig.__name__
        self.__doc__ = orig.__doc__
        self.__wrapped__ = orig

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.orig

    def __hash__(self) -> int:
        return hash(self.orig)


_COMPARED = ("isend", "irecv")


def _init_hook(orig: Callable[..., Any], after: Callable[[], None]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = orig(*args, **kwargs)
        after()
        return result

    init_process_group.__wrapped__ = orig  # type: ignore[attr-defined]
    return init_process_group


def _destroy_hook(orig: Callable[..., Any], before: Callable[[], None]) -> Callable[..., Any]:
    def destroy_process_group(group: Any = None) -> Any:
        rec = ACTIVE.recorder
        if rec is not None:
            rec.resolve_deferred()  # ops still to be written need their group's ranks
            rec.note_roles()  # and roles
        if group is None or group is dist.group.WORLD:
            before()
        return orig(group)

    destroy_process_group.__wrapped__ = orig  # type: ignore[attr-defined]
    return destroy_process_group


_LIFECYCLE = ("init_process_group", "destroy_process_group")


def _rebind_lifecycle(wrappers: dict[str, Any]) -> None:
    """torch's own modules that bound ``init_process_group`` or ``destroy_process_group``
    at import (``device_mesh``: ``init_device_mesh`` makes the default group with it)
    call the hooked ones too."""
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("torch.distributed."):
            continue
        if any(module is namespace for namespace in _NAMESPACES):
            continue
        names = getattr(module, "__dict__", {})
        for name in _LIFECYCLE:
            if names.get(name) is wrappers[name].__wrapped__:
                patch(module, name, wrappers[name])


def install(on_init: Callable[[], None], on_destroy: Callable[[], None]) -> None:
    """Patch torch.distributed; idempotent only through :func:`patching.restore_all`.

    The c10d kernels (:mod:`commlens.capture.c10d`) are registered first: the
    calls patched here then run below them, so each call is recorded once.
    """
    capture = ACTIVE.capture
    if capture is not None:
        c10d_kernels.install(capture.recorder)
    wrappers: dict[str, Any] = {}
    for name, extract in EXTRACTORS.items():
        orig = getattr(c10d, name, None) or getattr(dist, name, None)
        if orig is None:
            continue
        call = intercept(
            orig, extract, Recorder.on_call, api=API, after=AFTER.get(name), tensor_at=TENSOR
        )
        call.__name__ = call.__qualname__ = name
        wrappers[name] = calling(StandIn, call)(orig) if name in _COMPARED else call
    wrappers["batch_isend_irecv"] = batch_p2p.stand_in(c10d.batch_isend_irecv)
    wrappers["init_process_group"] = _init_hook(c10d.init_process_group, on_init)
    wrappers["destroy_process_group"] = _destroy_hook(c10d.destroy_process_group, on_destroy)
    for namespace in _NAMESPACES:
        for name, wrapper in wrappers.items():
            if hasattr(namespace, name):
                patch(namespace, name, wrapper)
    _rebind_lifecycle(wrappers)
    patch(Work, "wait", timed_wait(Work.wait, PendingOps.before_wait, PendingOps.after_wait))
