"""Names the command line offers before anything heavy is imported."""

from __future__ import annotations

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv")
BACKENDS = ("auto", "gloo", "nccl")
