"""Predicted calls of one rank in one step, and their totals per (op, role).

Three byte figures per call, all per rank:

- ``bytes``: the nccl-tests message size S (conventions §3), what the
  capture records in ``size_bytes``;
- ``wire_bytes``: bytes a ring moves on this rank's link, 2S(n−1)/n for an
  all-reduce, S(n−1)/n for all-gather / reduce-scatter / all-to-all, S for
  broadcast / reduce / send / recv (conventions §2);
- ``wire_bytes_b``: Study B's convention, the same without (n−1)/n.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from commlens.optable import wire_factor

OP_ORDER = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "all_to_all",
    "gather",
    "scatter",
    "send",
    "recv",
    "barrier",
)
ROLE_ORDER = ("dp", "tp", "pp", "ep", "cp", "")


@dataclass(frozen=True)
class PredictedCall:
    """``count`` identical calls a rank issues in one step."""

    op: str
    """Canonical op name, as the capture records it."""
    role: str
    """Role of the process group (dp, tp, pp) or "" for the world / unnamed groups."""
    group: tuple[int, ...]
    """Global ranks of the group; for send/recv the two ends (this rank first)."""
    size_bytes: int
    """nccl-tests S of one call."""
    count: int = 1
    """How many such calls per step."""
    phase: str = ""
    """forward, backward, optimizer or other."""
    what: str = ""
    """What the call carries (gradient bucket, layer activation, ...)."""
    overlap: bool = False
    """True when the call can hide behind backward compute (DDP buckets, FSDP prefetch)."""
    family: str = ""
    """Which concurrent groups share links with it: "embedding" for the tied-embedding
    all-reduce; empty means the role's groups (or the boundary pairs for send/recv)."""

    @property
    def group_size(self) -> int:
        return len(self.group)

    @property
    def total_bytes(self) -> int:
        return self.size_bytes * self.count

    @property
    def wire_bytes(self) -> float:
        return self.total_bytes * wire_factor(self.op, self.group_size)

    @property
    def wire_bytes_b(self) -> float:
        return self.total_bytes * wire_factor(self.op, self.group_size, "study_b")


@dataclass(frozen=True)
class OpVolume:
    """Totals of one (op, role) on one rank in one step."""

    op: str
    role: str
    calls: int
    bytes: int
    """Sum of S."""
    wire_bytes: float
    """Ring convention, with (n−1)/n."""
    wire_bytes_b: float
    """Study B convention, without (n−1)/n."""
    group_size: int = 0
    """Size of the group (the largest when several)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "op": self.op,
            "role": self.role,
            "calls": self.calls,
            "bytes": self.bytes,
            "wire_bytes": self.wire_bytes,
            "wire_bytes_study_b": self.wire_bytes_b,
            "group_size": self.group_size,
        }


def sort_key(op: str, role: str) -> tuple[int, int, str, str]:
    oi = OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER)
    ri = ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)
    return (ri, oi, role, op)


def aggregate(calls: Iterable[PredictedCall]) -> list[OpVolume]:
    """Totals per (op, role), ordered by role then op."""
    acc: dict[tuple[str, str], list[float]] = {}
    for c in calls:
        row = acc.setdefault((c.op, c.role), [0, 0, 0.0, 0.0, 0])
        row[0] += c.count
        row[1] += c.total_bytes
        row[2] += c.wire_bytes
        row[3] += c.wire_bytes_b
        row[4] = max(row[4], c.group_size)
    return [
        OpVolume(op, role, int(r[0]), int(r[1]), r[2], r[3], int(r[4]))
        for (op, role), r in sorted(acc.items(), key=lambda kv: sort_key(*kv[0]))
    ]


def by_role(volumes: Iterable[OpVolume]) -> dict[str, dict[str, float]]:
    """Calls and bytes summed per role ("" shown as "other")."""
    out: dict[str, dict[str, float]] = {}
    for v in volumes:
        row = out.setdefault(v.role or "other", {"calls": 0, "bytes": 0, "wire_bytes": 0.0})
        row["calls"] += v.calls
        row["bytes"] += v.bytes
        row["wire_bytes"] += v.wire_bytes
    return out
