"""What each intercepted ``torch.distributed`` function moves.

One extractor per function turns the caller's arguments into an
:data:`~commlens.capture.intercept.Intercepted`:
canonical op, group, element count, dtype, bytes in and out, the nccl-tests
size S (conventions §3) and the peer or root. Extractors only read the
arguments; they never touch tensor data.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from commlens.capture.groups import global_rank
from commlens.capture.intercept import Intercepted

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype | str) -> str:
    if isinstance(dtype, str):
        return dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).removeprefix("torch.")
        _DTYPE_NAMES[dtype] = name
    return name


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any = None):
    if i < len(args):
        return args[i]
    return kwargs.get(name, default)


def _sum_bytes(ts: Any) -> int:
    return sum(t.nbytes for t in ts) if ts else 0


def _root(group: Any, root: Any, group_root: Any) -> int | None:
    if root is not None:
        return int(root)
    if group_root is not None:
        return global_rank(group, int(group_root))
    return None


def _group_size(group: Any) -> int:
    return int(dist.get_world_size(group))


def _tensor_call(
    op: str,
    t: torch.Tensor,
    group: Any,
    size: int,
    peer: int | None,
    is_async: Any,
    bytes_in: int | None = None,
    bytes_out: int | None = None,
) -> Intercepted:
    nbytes = t.nbytes
    return (
        op,
        group,
        t.numel(),
        t.dtype,
        nbytes if bytes_in is None else bytes_in,
        nbytes if bytes_out is None else bytes_out,
        size,
        peer,
        bool(is_async),
        t,
    )


def _list_call(
    op: str, ts: list[torch.Tensor], group: Any, bytes_out: int, size: int, is_async: Any
) -> Intercepted:
    return (
        op,
        group,
        sum(t.numel() for t in ts),
        ts[0].dtype if ts else "",
        _sum_bytes(ts),
        bytes_out,
        size,
        None,
        bool(is_async),
        ts[0] if ts else None,
    )


def all_reduce(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    # The hottest path of all (DDP buckets, TP): no helper calls.
    n = len(a)
    t = a[0] if n else k["tensor"]
    nbytes = t.nbytes
    return (
        "all_reduce",
        a[2] if n > 2 else k.get("group"),
        t.numel(),
        t.dtype,
        nbytes,
        nbytes,
        nbytes,
        None,
        bool(a[3] if n > 3 else k.get("async_op", False)),
        t,
    )


def all_reduce_coalesced(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    ts = list(_arg(a, k, 0, "tensors"))
    n = _sum_bytes(ts)
    return _list_call("all_reduce", ts, _arg(a, k, 2, "group"), n, n, _arg(a, k, 3, "async_op"))


def all_gather(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    out, t = _arg(a, k, 0, "tensor_list"), _arg(a, k, 1, "tensor")
    total = _sum_bytes(out)
    group, is_async = _arg(a, k, 2, "group"), _arg(a, k, 3, "async_op")
    return _tensor_call("all_gather", t, group, total, None, is_async, bytes_out=total)


def all_gather_into_tensor(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    out, t = _arg(a, k, 0, "output_tensor"), _arg(a, k, 1, "input_tensor")
    total = out.nbytes
    group, is_async = _arg(a, k, 2, "group"), _arg(a, k, 3, "async_op")
    return _tensor_call("all_gather", t, group, total, None, is_async, bytes_out=total)


def all_gather_coalesced(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    outs, ins = _arg(a, k, 0, "output_tensor_lists"), list(_arg(a, k, 1, "input_tensor_list"))
    total = sum(_sum_bytes(o) for o in outs)
    group, is_async = _arg(a, k, 2, "group"), _arg(a, k, 3, "async_op")
    return _list_call("all_gather", ins, group, total, total, is_async)


def reduce_scatter(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    out, ins = _arg(a, k, 0, "output"), list(_arg(a, k, 1, "input_list"))
    group, is_async = _arg(a, k, 3, "group"), bool(_arg(a, k, 4, "async_op"))
    total = _sum_bytes(ins)
    count = sum(t.numel() for t in ins)
    return (
        "reduce_scatter",
        group,
        count,
        out.dtype,
        total,
        out.nbytes,
        total,
        None,
        is_async,
        out,
    )


def reduce_scatter_tensor(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    out, t = _arg(a, k, 0, "output"), _arg(a, k, 1, "input")
    group, is_async = _arg(a, k, 3, "group"), _arg(a, k, 4, "async_op")
    return _tensor_call("reduce_scatter", t, group, t.nbytes, None, is_async, bytes_out=out.nbytes)


def all_to_all(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    outs, ins = _arg(a, k, 0, "output_tensor_list"), list(_arg(a, k, 1, "input_tensor_list"))
    total = _sum_bytes(ins)
    group, is_async = _arg(a, k, 2, "group"), _arg(a, k, 3, "async_op")
    return _list_call("all_to_all", ins, group, _sum_bytes(outs), total, is_async)


def all_to_all_single(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    out, t = _arg(a, k, 0, "output"), _arg(a, k, 1, "input")
    group, is_async = _arg(a, k, 4, "group"), _arg(a, k, 5, "async_op")
    return _tensor_call("all_to_all", t, group, t.nbytes, None, is_async, bytes_out=out.nbytes)


def broadcast(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 2, "group")
    root = _root(group, _arg(a, k, 1, "src"), k.get("group_src"))
    return _tensor_call("broadcast", t, group, t.nbytes, root, _arg(a, k, 3, "async_op"))


def reduce(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 1, "dst"), k.get("group_dst"))
    return _tensor_call("reduce", t, group, t.nbytes, root, _arg(a, k, 4, "async_op"))


def gather(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    t, outs, group = _arg(a, k, 0, "tensor"), _arg(a, k, 1, "gather_list"), _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 2, "dst"), k.get("group_dst"))
    # S is the whole gathered buffer: the rank's piece times the group size.
    size = t.nbytes * _group_size(group)
    is_async = _arg(a, k, 4, "async_op")
    return _tensor_call("gather", t, group, size, root, is_async, bytes_out=_sum_bytes(outs))


def scatter(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    t, ins, group = _arg(a, k, 0, "tensor"), _arg(a, k, 1, "scatter_list"), _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 2, "src"), k.get("group_src"))
    size = t.nbytes * _group_size(group)
    is_async = _arg(a, k, 4, "async_op")
    return _tensor_call("scatter", t, group, size, root, is_async, bytes_in=_sum_bytes(ins))


def send(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 2, "group")
    peer = _root(group, _arg(a, k, 1, "dst"), k.get("group_dst"))
    return _tensor_call("send", t, group, t.nbytes, peer, False, bytes_out=0)


def recv(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 2, "group")
    peer = _root(group, _arg(a, k, 1, "src"), k.get("group_src"))
    return _tensor_call("recv", t, group, t.nbytes, peer, False, bytes_in=0)


def recv_source(
    call: Intercepted, result: Any, a: tuple[Any, ...], k: dict[str, Any]
) -> Intercepted:
    """A receive from any source: the sender is what ``recv`` returns."""
    if call[7] is None and isinstance(result, int) and result >= 0:
        return (*call[:7], int(result), *call[8:])  # type: ignore[return-value]
    return call


def isend(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    op, group, count, dtype, b_in, b_out, size, peer, _, t = send(a, k)
    return (op, group, count, dtype, b_in, b_out, size, peer, True, t)


def irecv(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    op, group, count, dtype, b_in, b_out, size, peer, _, t = recv(a, k)
    return (op, group, count, dtype, b_in, b_out, size, peer, True, t)


def barrier(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    is_async = bool(_arg(a, k, 1, "async_op", False))
    return ("barrier", _arg(a, k, 0, "group"), 0, "", 0, 0, 0, None, is_async, None)


def monitored_barrier(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    return ("barrier", _arg(a, k, 0, "group"), 0, "", 0, 0, 0, None, False, None)


def broadcast_coalesced(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    """``dist._broadcast_coalesced(group, tensors, buffer_size, src)``: DDP's start-up sync.

    One event for the whole call: the C++ side packs the tensors into
    ``buffer_size`` buckets and broadcasts each, which Python cannot see.
    """
    group = _arg(a, k, 0, "process_group")
    ts = list(_arg(a, k, 1, "tensors"))
    n = _sum_bytes(ts)
    root = global_rank(group, int(_arg(a, k, 3, "src", 0)))
    op, _, count, dtype, b_in, b_out, size, _, _, t = _list_call(
        "broadcast", ts, group, n, n, False
    )
    return (op, group, count, dtype, b_in, b_out, size, root, False, t)
