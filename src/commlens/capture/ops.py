"""What each intercepted ``torch.distributed`` function moves.

One extractor per function turns the caller's arguments into a :class:`Call`:
canonical op, group, element count, dtype, bytes in and out, the nccl-tests
size S (conventions §3) and the peer or root. Extractors only read the
arguments; they never touch tensor data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from commlens.capture.groups import global_rank


@dataclass(slots=True)
class Call:
    op: str
    group: Any
    count: int
    dtype: str
    bytes_in: int
    bytes_out: int
    size_bytes: int
    peer: int | None
    is_async: bool
    tensor: torch.Tensor | None = None
    # gather/scatter: S is the whole buffer, the rank's piece times the group size.
    piece_times_group: bool = False
    # Filled after the call for ops whose size or peer is known only then.
    after: Callable[[Call, Any, tuple[Any, ...], dict[str, Any]], None] | None = None


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).removeprefix("torch.")
        _DTYPE_NAMES[dtype] = name
    return name


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any = None):
    if i < len(args):
        return args[i]
    return kwargs.get(name, default)


def _nbytes(t: torch.Tensor) -> int:
    return int(t.nbytes)


def _sum_bytes(ts: Any) -> int:
    return sum(_nbytes(t) for t in ts) if ts else 0


def _root(group: Any, root: Any, group_root: Any) -> int | None:
    if root is not None:
        return int(root)
    if group_root is not None:
        return global_rank(group, int(group_root))
    return None


def _tensor_call(
    op: str,
    t: torch.Tensor,
    group: Any,
    size: int,
    peer: int | None,
    is_async: bool,
    bytes_out: int | None = None,
) -> Call:
    nbytes = _nbytes(t)
    return Call(
        op,
        group,
        int(t.numel()),
        dtype_name(t.dtype),
        nbytes,
        nbytes if bytes_out is None else bytes_out,
        size,
        peer,
        bool(is_async),
        t,
    )


def all_reduce(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    # The hottest path of all (DDP buckets, TP): no helper calls.
    n = len(a)
    t = a[0] if n else k["tensor"]
    nbytes = t.nbytes
    return Call(
        "all_reduce",
        a[2] if n > 2 else k.get("group"),
        t.numel(),
        dtype_name(t.dtype),
        nbytes,
        nbytes,
        nbytes,
        None,
        bool(a[3] if n > 3 else k.get("async_op", False)),
        t,
    )


def all_reduce_coalesced(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    ts = list(_arg(a, k, 0, "tensors"))
    n = _sum_bytes(ts)
    return Call(
        "all_reduce",
        _arg(a, k, 2, "group"),
        sum(int(t.numel()) for t in ts),
        dtype_name(ts[0].dtype),
        n,
        n,
        n,
        None,
        bool(_arg(a, k, 3, "async_op", False)),
        ts[0],
    )


def all_gather(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    out, t = _arg(a, k, 0, "tensor_list"), _arg(a, k, 1, "tensor")
    total = _sum_bytes(out)
    return _tensor_call(
        "all_gather",
        t,
        _arg(a, k, 2, "group"),
        total,
        None,
        _arg(a, k, 3, "async_op", False),
        total,
    )


def all_gather_into_tensor(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    out, t = _arg(a, k, 0, "output_tensor"), _arg(a, k, 1, "input_tensor")
    total = _nbytes(out)
    return _tensor_call(
        "all_gather",
        t,
        _arg(a, k, 2, "group"),
        total,
        None,
        _arg(a, k, 3, "async_op", False),
        total,
    )


def all_gather_coalesced(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    outs, ins = _arg(a, k, 0, "output_tensor_lists"), list(_arg(a, k, 1, "input_tensor_list"))
    total = sum(_sum_bytes(o) for o in outs)
    return Call(
        "all_gather",
        _arg(a, k, 2, "group"),
        sum(int(t.numel()) for t in ins),
        dtype_name(ins[0].dtype),
        _sum_bytes(ins),
        total,
        total,
        None,
        bool(_arg(a, k, 3, "async_op", False)),
        ins[0],
    )


def reduce_scatter(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    out, ins = _arg(a, k, 0, "output"), _arg(a, k, 1, "input_list")
    total = _sum_bytes(ins)
    return Call(
        "reduce_scatter",
        _arg(a, k, 3, "group"),
        sum(int(t.numel()) for t in ins),
        dtype_name(out.dtype),
        total,
        _nbytes(out),
        total,
        None,
        bool(_arg(a, k, 4, "async_op", False)),
        out,
    )


def reduce_scatter_tensor(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    out, t = _arg(a, k, 0, "output"), _arg(a, k, 1, "input")
    return _tensor_call(
        "reduce_scatter",
        t,
        _arg(a, k, 3, "group"),
        _nbytes(t),
        None,
        _arg(a, k, 4, "async_op", False),
        _nbytes(out),
    )


def all_to_all(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    outs, ins = _arg(a, k, 0, "output_tensor_list"), _arg(a, k, 1, "input_tensor_list")
    total = _sum_bytes(ins)
    return Call(
        "all_to_all",
        _arg(a, k, 2, "group"),
        sum(int(t.numel()) for t in ins),
        dtype_name(ins[0].dtype),
        total,
        _sum_bytes(outs),
        total,
        None,
        bool(_arg(a, k, 3, "async_op", False)),
        ins[0],
    )


def all_to_all_single(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    out, t = _arg(a, k, 0, "output"), _arg(a, k, 1, "input")
    return _tensor_call(
        "all_to_all",
        t,
        _arg(a, k, 4, "group"),
        _nbytes(t),
        None,
        _arg(a, k, 5, "async_op", False),
        _nbytes(out),
    )


def broadcast(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 2, "group")
    root = _root(group, _arg(a, k, 1, "src"), k.get("group_src"))
    return _tensor_call("broadcast", t, group, _nbytes(t), root, _arg(a, k, 3, "async_op", False))


def reduce(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 1, "dst"), k.get("group_dst"))
    return _tensor_call("reduce", t, group, _nbytes(t), root, _arg(a, k, 4, "async_op", False))


def gather(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    t, outs, group = _arg(a, k, 0, "tensor"), _arg(a, k, 1, "gather_list"), _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 2, "dst"), k.get("group_dst"))
    call = _tensor_call(
        "gather", t, group, _nbytes(t), root, _arg(a, k, 4, "async_op", False), _sum_bytes(outs)
    )
    call.piece_times_group = True
    return call


def scatter(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    t, ins, group = _arg(a, k, 0, "tensor"), _arg(a, k, 1, "scatter_list"), _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 2, "src"), k.get("group_src"))
    call = _tensor_call("scatter", t, group, _nbytes(t), root, _arg(a, k, 4, "async_op", False))
    call.bytes_in = _sum_bytes(ins)
    call.piece_times_group = True
    return call


def send(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 2, "group")
    peer = _root(group, _arg(a, k, 1, "dst"), k.get("group_dst"))
    return _tensor_call("send", t, group, _nbytes(t), peer, False, 0)


def recv(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    t, group = _arg(a, k, 0, "tensor"), _arg(a, k, 2, "group")
    peer = _root(group, _arg(a, k, 1, "src"), k.get("group_src"))
    call = _tensor_call("recv", t, group, _nbytes(t), peer, False)
    call.bytes_in = 0
    if peer is None:
        call.after = _recv_source
    return call


def _recv_source(call: Call, result: Any, a: tuple[Any, ...], k: dict[str, Any]) -> None:
    if isinstance(result, int) and result >= 0:
        call.peer = int(result)


def isend(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    call = send(a, k)
    call.is_async = True
    return call


def irecv(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    call = recv(a, k)
    call.is_async = True
    return call


def barrier(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    return Call(
        "barrier",
        _arg(a, k, 0, "group"),
        0,
        "",
        0,
        0,
        0,
        None,
        bool(_arg(a, k, 1, "async_op", False)),
    )


def monitored_barrier(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    return Call("barrier", _arg(a, k, 0, "group"), 0, "", 0, 0, 0, None, False)


def broadcast_coalesced(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    """``dist._broadcast_coalesced(group, tensors, buffer_size, src)``: DDP's start-up sync.

    One event for the whole call: the C++ side packs the tensors into
    ``buffer_size`` buckets and broadcasts each, which Python cannot see.
    """
    group = _arg(a, k, 0, "process_group")
    ts = list(_arg(a, k, 1, "tensors"))
    n = _sum_bytes(ts)
    root = global_rank(group, int(_arg(a, k, 3, "src", 0)))
    return Call(
        "broadcast",
        group,
        sum(int(t.numel()) for t in ts),
        dtype_name(ts[0].dtype) if ts else "",
        n,
        n,
        n,
        root,
        False,
        ts[0] if ts else None,
    )
