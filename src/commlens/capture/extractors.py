"""The table of intercepted ``torch.distributed`` functions and their extractors."""

from __future__ import annotations

from commlens.capture import objects, ops
from commlens.capture.intercept import After, Extractor

_broadcast_object = objects.object_list_call("broadcast_object", "src", "group_src")
_send_object = objects.object_list_call("send_object", "dst", "group_dst")
_recv_object = objects.object_list_call("recv_object", "src", "group_src")

# torch.distributed function name -> extractor
EXTRACTORS: dict[str, Extractor] = {
    "all_reduce": ops.all_reduce,
    "all_reduce_coalesced": ops.all_reduce_coalesced,
    "all_gather": ops.all_gather,
    "all_gather_into_tensor": ops.all_gather_into_tensor,
    "all_gather_single": ops.all_gather_into_tensor,
    "_all_gather_base": ops.all_gather_into_tensor,
    "all_gather_coalesced": ops.all_gather_coalesced,
    "reduce_scatter": ops.reduce_scatter,
    "reduce_scatter_tensor": ops.reduce_scatter_tensor,
    "reduce_scatter_single": ops.reduce_scatter_tensor,
    "_reduce_scatter_base": ops.reduce_scatter_tensor,
    "all_to_all": ops.all_to_all,
    "all_to_all_single": ops.all_to_all_single,
    "broadcast": ops.broadcast,
    "_broadcast_coalesced": ops.broadcast_coalesced,
    "reduce": ops.reduce,
    "gather": ops.gather,
    "scatter": ops.scatter,
    "send": ops.send,
    "recv": ops.recv,
    "isend": ops.isend,
    "irecv": ops.irecv,
    "barrier": ops.barrier,
    "monitored_barrier": ops.monitored_barrier,
    "all_gather_object": objects.all_gather_object,
    "gather_object": objects.gather_object,
    "scatter_object_list": objects.scatter_object_list,
    "broadcast_object_list": _broadcast_object[0],
    "send_object_list": _send_object[0],
    "recv_object_list": _recv_object[0],
}

# What is known only after the call returns.
AFTER: dict[str, After] = {
    "recv": ops.recv_source,
    "all_gather_object": objects.all_gather_object_after,
    "scatter_object_list": objects.scatter_object_after,
    "broadcast_object_list": _broadcast_object[1],
    "send_object_list": _send_object[1],
    "recv_object_list": _recv_object[1],
}
