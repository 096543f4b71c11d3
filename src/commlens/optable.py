"""The canonical names of communication ops and phases, every fact about an op, and
the backends' facts.

:data:`OP_TRAFFIC` is the one table of bandwidth factors (conventions §2, §3):
analysis, the model and bench all read it. ``S`` is the op's nccl-tests
message size and ``n`` the size of the op's *own* process group, never the
world size. Beside it: which ops are point-to-point (:data:`P2P_OPS`), which
are rooted and which way their data flows (:data:`FROM_ROOT`, :data:`TO_ROOT`),
which block every member until all arrive (:data:`BLOCKING`), the tensor op an
object op runs as (:data:`TENSOR_TWIN`), which must have the same size on every
member (:data:`EQUAL_SIZES`), whose S is the output (:data:`SIZE_IS_OUTPUT`) or
counted by a member's share (:data:`COUNTED_BY_SHARE`), and per backend what a
process group of it does (:data:`BACKENDS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

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

SENDS = ("send", "send_object")
"""Point-to-point ops that send."""
RECVS = ("recv", "recv_object")
"""Point-to-point ops that receive."""
P2P_OPS = frozenset(SENDS + RECVS)
"""Point-to-point ops: one peer, no process group of their own to match in."""
RECEIVER = {"send": "recv", "send_object": "recv_object"}
"""The op that receives what a send sends."""
FROM_ROOT = ("broadcast", "scatter", "broadcast_object", "scatter_object")
"""Rooted ops whose members receive the root's data."""
TO_ROOT = ("reduce", "gather", "gather_object")
"""Rooted ops whose root receives every member's data."""
ROOTED = frozenset(FROM_ROOT + TO_ROOT)
"""Ops with a root (the event's ``peer``)."""
BLOCKING = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
"""Collectives no member can finish before every member has started."""
TENSOR_TWIN = {
    "all_gather_object": "all_gather",
    "gather_object": "gather",
    "scatter_object": "scatter",
    "broadcast_object": "broadcast",
    "send_object": "send",
    "recv_object": "recv",
}
"""Object op -> the tensor op it runs as (it pickles the objects into a byte tensor)."""
EQUAL_SIZES = frozenset(("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"))
"""Collectives whose members must all pass the same size (all_to_all, gather and
scatter may differ per member; an object op's pickles differ by nature)."""
SIZE_IS_OUTPUT = frozenset(("all_gather", "gather"))
"""Ops whose message size S is the whole output buffer (every other op's: the input)."""
COUNTED_BY_SHARE = frozenset(("all_gather", "reduce_scatter"))
"""Ops that NCCL (and the tools that read its counts) sizes by one member's share:
S = that size × the group's size."""

WIRE_CONVENTIONS = ("ring", "study_b")


@dataclass(frozen=True)
class Traffic:
    """How the ``S`` bytes of one op cross each rank's link.

    ``shared``: S is made of n equal shares and the n−1 shares of the other
    ranks cross (a fraction (n−1)/n of S); otherwise all of S crosses.
    ``passes``: how many times that happens (2 for an all-reduce, which is a
    reduce-scatter followed by an all-gather).
    """

    passes: int
    shared: bool

    def bus(self, n: int) -> float:
        """busbw / algbw in a group of ``n`` (nccl-tests): 2(n−1)/n, (n−1)/n or 1.

        A shared op in a group of one moves nothing: 0.
        """
        if not self.shared:
            return float(self.passes)
        return self.passes * (n - 1) / n if n > 1 else 0.0

    def wire(self, n: int, convention: str = "ring") -> float:
        """Bytes one rank puts on the wire per byte of S.

        ``ring`` is the bus factor. ``study_b`` is Study B's convention, the
        same without (n−1)/n: 2 for an all-reduce, 1 otherwise, and still 0
        for a shared op in a group of one.
        """
        if convention == "ring":
            return self.bus(n)
        if convention == "study_b":
            return float(self.passes) if n > 1 or not self.shared else 0.0
        raise ValueError(
            f"unknown wire convention {convention!r}; expected one of {', '.join(WIRE_CONVENTIONS)}"
        )


ALL_REDUCE = Traffic(passes=2, shared=True)
"""2(n−1)/n: every share is reduced around the group, then gathered back."""
SHARED = Traffic(passes=1, shared=True)
"""(n−1)/n: each rank's share crosses once (all-gather, reduce-scatter, all-to-all)."""
WHOLE = Traffic(passes=1, shared=False)
"""1: the whole buffer crosses once (broadcast, reduce, point-to-point)."""

OP_TRAFFIC: Mapping[str, Traffic] = MappingProxyType(
    {
        "all_reduce": ALL_REDUCE,
        "all_gather": SHARED,
        "reduce_scatter": SHARED,
        "all_to_all": SHARED,
        # gather/scatter are not in nccl-tests; as in an all-gather, each
        # rank's share of S crosses the root's link once (a reconstruction).
        "gather": SHARED,
        "scatter": SHARED,
        "broadcast": WHOLE,
        "reduce": WHOLE,
        "send": WHOLE,
        "recv": WHOLE,
        # A barrier carries no data (S = 0), so its busbw and wire bytes are 0
        # whatever the factor; 1 leaves busbw = algbw, as for any op that is
        # not split into shares.
        "barrier": WHOLE,
        # Object variants move like their tensor op.
        "all_gather_object": SHARED,
        "gather_object": SHARED,
        "scatter_object": SHARED,
        "broadcast_object": WHOLE,
        "send_object": WHOLE,
        "recv_object": WHOLE,
        # nccl-tests' sendrecv: every rank sends S to the next, receives S from the previous.
        "sendrecv": WHOLE,
    }
)
"""Op name -> its :class:`Traffic`, for every op of :data:`OPS` and bench's ``sendrecv``."""


def traffic(op: str) -> Traffic:
    """The traffic of ``op``; an op the table does not know counts its bytes as they are."""
    return OP_TRAFFIC.get(op, WHOLE)


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` in a group of ``n`` ranks (conventions §3)."""
    return traffic(op).bus(n)


def wire_factor(op: str, n: int, convention: str = "ring") -> float:
    """Bytes one rank puts on the wire per byte of S (conventions §2); see :meth:`Traffic.wire`."""
    return traffic(op).wire(n, convention)


@dataclass(frozen=True)
class Backend:
    """What a process group of one torch.distributed backend does with its ops."""

    name: str
    workers: int
    """Ops one group runs at once (gloo: its worker threads, 2 by default)."""
    runs_as: Mapping[str, str]
    """Ops the backend runs as another (gloo has no native reduce-scatter)."""

    def op_as_run(self, op: str) -> str:
        """The op ``op`` is run as on this backend."""
        return self.runs_as.get(op, op)


GLOO = Backend("gloo", workers=2, runs_as=MappingProxyType({"reduce_scatter": "all_reduce"}))
NCCL = Backend("nccl", workers=1, runs_as=MappingProxyType({}))
BACKENDS: Mapping[str, Backend] = MappingProxyType({b.name: b for b in (GLOO, NCCL)})
"""Backend name -> its :class:`Backend`."""


def backend(name: str | None) -> Backend:
    """The :class:`Backend` of ``name``; one the table does not know runs one op at a
    time per group and each op as itself, as NCCL does."""
    return BACKENDS.get(name or "", NCCL)
