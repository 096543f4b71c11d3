"""Other tools' names of collectives, mapped to commlens's ops, and their sizes.

:func:`canonical_op` reads a collective name as the profiler's
``record_param_comms``, a ``c10d::`` op, a ``nccl:``/``gloo:`` annotation, a
Flight Recorder ``profiling_name``, DeepSpeed or NCCL Inspector write it;
:func:`kernel_op` reads an NCCL kernel name (the fallback when nothing else
names the op: RCCL names every kernel alike). :func:`sizes` turns element
counts into commlens's byte columns (conventions §3: ``size_bytes`` is the
nccl-tests message size S).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commlens.optable import SIZE_IS_OUTPUT

_NAMES: dict[str, str] = {}
for _op, _aliases in {
    "all_reduce": "allreduce all_reduce allreduce_coalesced all_reduce_coalesced",
    "all_gather": "allgather all_gather _allgather_base allgather_base all_gather_base "
    "_all_gather_base allgather_into_tensor all_gather_into_tensor "
    "allgather_into_tensor_coalesced all_gather_into_tensor_coalesced allgather_coalesced "
    "all_gather_coalesced",
    "reduce_scatter": "reduce_scatter reducescatter _reduce_scatter_base reduce_scatter_base "
    "reduce_scatter_tensor reduce_scatter_tensor_coalesced",
    "all_to_all": "all_to_all alltoall alltoall_base all_to_allv all_to_all_single "
    "all_to_all_v alltoallv",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv recv_any_source",
    "barrier": "barrier",
}.items():
    for _alias in _aliases.split():
        _NAMES[_alias] = _op

SKIPPED = frozenset({"wait", "coalesced", "", "init", "split"})
"""Names that are not a communication op of their own."""


def canonical_op(name: str) -> str | None:
    """commlens's op for a collective name from any source; None when not an op.

    Prefixes (``c10d::``, ``nccl:``, ``gloo:``), a trailing ``_`` and a
    Flight Recorder peer suffix (``send 0->3``) are dropped; case is ignored.
    """
    text = name.strip()
    for prefix in ("c10d::", "nccl:", "gloo:", "mpi:", "ucc:", "xccl:"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    text = text.split(" ")[0].strip().lower()
    if text in SKIPPED:
        return None
    found = _NAMES.get(text) or _NAMES.get(text.rstrip("_"))
    return found


_KERNEL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_KERNEL_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send",
    "send": "send",
    "recv": "recv",
}


def is_comm_kernel(name: str) -> bool:
    low = name.lower()
    return "nccl" in low or "rccl" in low


def kernel_op(name: str) -> str | None:
    """The op an NCCL kernel's name says (``ncclDevKernel_AllGather_RING_LL``);
    None for ``Generic`` (RCCL) and names that say none. SendRecv reads as send:
    it serves send, recv and all_to_all alike."""
    match = _KERNEL.search(name)
    if not match:
        return None
    return _KERNEL_OPS.get(match.group(1).lower())


@dataclass(frozen=True)
class Sizes:
    count: int
    bytes_in: int
    bytes_out: int
    size_bytes: int


def sizes(op: str, n_in: int, n_out: int | None, elem: int, group_size: int) -> Sizes:
    """Byte columns of ``op`` from input and output element counts (n_out None: unknown).

    S: all_reduce, broadcast, reduce, send, recv, all_to_all, reduce_scatter and
    scatter: the input; all_gather and gather: the whole output (the input times
    the group size when the output is unknown); barrier: 0.
    """
    if op == "barrier":
        return Sizes(0, 0, 0, 0)
    b_in = n_in * elem
    if n_out is None:
        if op in SIZE_IS_OUTPUT:
            n_out = n_in * max(group_size, 1)
        elif op in ("reduce_scatter", "scatter"):
            n_out = n_in // max(group_size, 1)
        else:
            n_out = n_in
    b_out = n_out * elem
    size = b_out if op in SIZE_IS_OUTPUT else b_in
    if op == "send":  # a send receives nothing, a recv contributes nothing
        return Sizes(n_in, b_in, 0, size)
    if op == "recv":
        return Sizes(n_in, 0, b_in, size)
    return Sizes(n_in, b_in, b_out, size)
