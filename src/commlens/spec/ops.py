"""The canonical names of communication ops and phases, shared by every part."""

from __future__ import annotations

# Tensor collectives and point-to-point ops, as events and models name them.
TENSOR_OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "send",
    "recv",
    "barrier",
)
OBJECT_OPS = (
    "all_gather_object",
    "gather_object",
    "scatter_object",
    "broadcast_object",
    "send_object",
    "recv_object",
)
OPS = TENSOR_OPS + OBJECT_OPS
PHASES = ("forward", "backward", "optimizer", "other")
