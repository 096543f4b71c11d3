"""Interception of ``batch_isend_irecv`` (events with ``api`` "batch_p2p").

One call issues several sends and receives at once: each is an event of its
own, all with the batch's issue time, each timed to completion by its own
``Work`` when the backend returns one per op.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import Any

from commlens.capture.frameworks import P2P_PHASES
from commlens.capture.intercept import Intercepted, intercept
from commlens.capture.recorder import Recorder

API = "batch_p2p"


def _p2p_call(op: Any) -> Intercepted:
    tensor, group = op.tensor, op.group
    name = getattr(op.op, "__name__", "")
    peer = int(op.peer) if op.peer is not None else None
    nbytes = tensor.nbytes
    if "send" in name:
        return ("send", group, tensor.numel(), tensor.dtype, nbytes, 0, nbytes, peer, True, tensor)
    return ("recv", group, tensor.numel(), tensor.dtype, 0, nbytes, nbytes, peer, True, tensor)


def _extract(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Intercepted]:
    ops = args[0] if args else kwargs["p2p_op_list"]
    return [_p2p_call(op) for op in ops]


def _record(
    rec: Recorder,
    calls: list[Intercepted],
    t_issue: int,
    t_return: int,
    works: Any,
    frame: FrameType | None,
    api: str,
    phase_hint: str,
    _gpu: Any,
) -> None:
    per_op = list(works) if works is not None else []
    for i, call in enumerate(calls):
        work = per_op[i] if len(per_op) == len(calls) else None
        hint = phase_hint or P2P_PHASES.get(id(call[-1]), "")  # a pipeline's mixed batch
        rec.on_call(call, t_issue, t_return, work, frame, api, hint)


def stand_in(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The intercepted ``batch_isend_irecv``; the ops inside are not recorded again."""
    return intercept(orig, _extract, _record, api=API, below_autograd=False)
