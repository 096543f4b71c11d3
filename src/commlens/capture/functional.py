"""Functional collectives: DTensor tensor parallelism, forward and backward
(events with ``api`` "functional").

DTensor and ``torch.distributed._functional_collectives`` issue their
communication as ``torch.ops._c10d_functional.<op>(...)`` looked up on the op
namespace at call time, in forward and in the autograd backward of
redistributions alike. Replacing those namespace attributes is the narrowest
mechanism that sees them all: nothing else is intercepted (a dispatch mode
would see every aten op). The op returns at once; completion is the
``wait_tensor`` on its output (:meth:`Recorder.on_issued`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed.distributed_c10d as c10d

from commlens.capture.intercept import Extractor, Intercepted, calling, intercept, timed_wait
from commlens.capture.patching import patch
from commlens.capture.pending import PendingOps
from commlens.capture.recorder import Recorder

API = "functional"

_GROUPS: dict[Any, Any] = {}


def _group(name: Any) -> Any:
    """The process group of a functional op's group name (resolved once per name)."""
    group = _GROUPS.get(name)
    if group is None:
        group = _GROUPS[name] = c10d._resolve_process_group(name)
    return group


def _single(op: str, t: torch.Tensor, group_name: Any, size: int, out: int) -> Intercepted:
    return (op, _group(group_name), t.numel(), t.dtype, t.nbytes, out, size, None, True, t)


def _all_reduce(a: tuple[Any, ...], _k: dict[str, Any]) -> Intercepted:
    n = a[0].nbytes
    return _single("all_reduce", a[0], a[2], n, n)


def _all_gather(a: tuple[Any, ...], _k: dict[str, Any]) -> Intercepted:
    total = a[0].nbytes * int(a[1])
    return _single("all_gather", a[0], a[2], total, total)


def _reduce_scatter(a: tuple[Any, ...], _k: dict[str, Any]) -> Intercepted:
    n = a[0].nbytes
    return _single("reduce_scatter", a[0], a[3], n, n // max(1, int(a[2])))


def _all_to_all(a: tuple[Any, ...], _k: dict[str, Any]) -> Intercepted:
    n = a[0].nbytes
    return _single("all_to_all", a[0], a[3], n, n)


def _broadcast(a: tuple[Any, ...], _k: dict[str, Any]) -> Intercepted:
    t, n = a[0], a[0].nbytes
    return ("broadcast", _group(a[2]), t.numel(), t.dtype, n, n, n, int(a[1]), True, t)


def _coalesced(op: str, group_at: int, size_at: int | None) -> Extractor:
    def extract(a: tuple[Any, ...], _k: dict[str, Any]) -> Intercepted:
        ts = list(a[0])
        b_in = sum(t.nbytes for t in ts)
        n = b_in * int(a[size_at or 1]) if op == "all_gather" else b_in
        count = sum(t.numel() for t in ts)
        return (op, _group(a[group_at]), count, ts[0].dtype, b_in, n, n, None, True, ts[0])

    return extract


# Op name -> extractor (of the positional arguments: a call with keywords is not recorded).
_EXTRACT: dict[str, Extractor] = {
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
    """Stands in for one op packet: calls are intercepted, attributes are the packet's."""

    def __init__(self, packet: Any) -> None:
        self._packet = packet

    def __getattr__(self, name: str) -> Any:
        return getattr(self._packet, name)


def install() -> None:
    _GROUPS.clear()  # names are reused by new process groups across captures
    namespace = torch.ops._c10d_functional
    for name, extract in _EXTRACT.items():
        packet = getattr(namespace, name, None)
        if packet is not None:
            call = intercept(packet, extract, Recorder.on_issued, api=API, positional=True)
            patch(namespace, name, calling(FunctionalOp, call)(packet))
    packet = namespace.wait_tensor
    wait = timed_wait(packet, PendingOps.before_output_wait, PendingOps.after_output_wait)
    patch(namespace, "wait_tensor", calling(FunctionalOp, wait)(packet))
