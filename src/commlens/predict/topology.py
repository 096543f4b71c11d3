"""Where ranks sit and what a call costs on the links between them.

Ranks fill nodes in order (``node = rank // gpus_per_node``), the placement
torchrun and Slurm use; with ParallelDims' Megatron order that keeps TP
groups inside a node. A group on one node runs on the intra-node profile, a
group with one member per node on the inter-node profile, and a group with
``g`` members on each of ``N`` nodes runs hierarchically:

- all-reduce: intra reduce-scatter(S, g) + inter all-reduce(S/g, N) + intra all-gather(S, g)
- all-gather: inter all-gather(S/g, N) + intra all-gather(S, g)
- reduce-scatter: intra reduce-scatter(S, g) + inter reduce-scatter(S/g, N)
- broadcast / reduce: inter (S, N) + intra (S, g)
- all-to-all, gather, scatter: direct exchange, the off-node share (n−g)/n
  of S over the inter link plus the on-node share (g−1)/n over the intra link

Each node has ``nics_per_node`` inter-node links (default one, as with one
shaped uplink per emulated node; a DGX-class node has one per GPU). Every
group of a role works at the same time, so the inter-node β is multiplied by
⌈flows / nics_per_node⌉, ``flows`` being how many ranks of the busiest node
send across nodes at once for that role (:func:`link_flows`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from commlens.errors import UsageError
from commlens.optable import P2P_OPS
from commlens.predict.cost import ALGORITHMS, flat_time
from commlens.predict.profiles import NetworkProfile


@dataclass(frozen=True)
class Fabric:
    """The links of a cluster: one profile inside a node, one between nodes."""

    inter: NetworkProfile
    """Profile of the links between nodes."""
    intra: NetworkProfile
    """Profile of the links inside a node."""
    gpus_per_node: int = 1
    """Ranks per node; 1 puts every rank on its own node."""
    algorithm: str = "ring"
    """Collective algorithm: ring, tree, direct or auto (fastest per call)."""
    nics_per_node: int = 1
    """Inter-node links per node; concurrent flows share them evenly."""
    _shape_cache: dict[int, tuple[tuple[int, ...], tuple[int, int]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise UsageError(f"--gpus-per-node must be at least 1, got {self.gpus_per_node}")
        if self.nics_per_node < 1:
            raise UsageError(f"--nics-per-node must be at least 1, got {self.nics_per_node}")
        if self.algorithm not in ALGORITHMS:
            raise UsageError(
                f"unknown algorithm {self.algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
            )

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def shape(self, group: tuple[int, ...]) -> tuple[int, int]:
        """(nodes spanned, most members on one node) of ``group``."""
        # Keyed by identity (the entry holds the group, so its id stays unique): a
        # rank's calls share one tuple per group, and hashing a 100k-rank tuple
        # on every call would dominate the prediction.
        entry = self._shape_cache.get(id(group))
        if entry is None or entry[0] is not group:
            per_node = Counter(self.node(r) for r in group)
            entry = (group, (len(per_node), max(per_node.values())))
            self._shape_cache[id(group)] = entry
        return entry[1]

    def _intra(self, op: str, size: float, n: int) -> float:
        p = self.intra
        return flat_time(op, size, n, p.alpha(op), p.beta(op), self.algorithm)

    def _inter(self, op: str, size: float, n: int, flows: int) -> float:
        p = self.inter
        share = max(1, -(-flows // self.nics_per_node))
        return flat_time(op, size, n, p.alpha(op), p.beta(op) * share, self.algorithm)

    def time(self, op: str, size_bytes: float, group: tuple[int, ...], flows: int = 1) -> float:
        """Seconds for one call of ``op`` on ``group`` (for send/recv: the two ends)."""
        n = len(group)
        if n == 0:
            return 0.0
        nodes, g = self.shape(group)
        if op in P2P_OPS:
            return (
                self._intra(op, size_bytes, 2)
                if nodes == 1
                else self._inter(op, size_bytes, 2, flows)
            )
        if nodes == 1:
            return self._intra(op, size_bytes, n)
        if g == 1:
            return self._inter(op, size_bytes, n, flows)
        s = float(size_bytes)
        if op == "all_reduce":
            return (
                self._intra("reduce_scatter", s, g)
                + self._inter("all_reduce", s / g, nodes, flows)
                + self._intra("all_gather", s, g)
            )
        if op == "all_gather":
            return self._inter("all_gather", s / g, nodes, flows) + self._intra("all_gather", s, g)
        if op == "reduce_scatter":
            return self._intra("reduce_scatter", s, g) + self._inter(
                "reduce_scatter", s / g, nodes, flows
            )
        if op in ("broadcast", "reduce"):
            return self._inter(op, s, nodes, flows) + self._intra(op, s, g)
        if op == "barrier":
            return self._inter("barrier", 0.0, nodes, flows) + 2 * self._intra("barrier", 0.0, g)
        # all_to_all, gather, scatter: direct exchange, the off-node share of S
        # over the inter link and the on-node share over the intra link.
        inter, intra = self.inter, self.intra
        return (
            inter.alpha(op)
            + s * (n - g) / n * inter.beta(op) * max(1, flows)
            + intra.alpha(op)
            + s * (g - 1) / n * intra.beta(op)
        )


def link_flows(fabric: Fabric, groups: Iterable[Sequence[int]]) -> int:
    """Ranks of the busiest node whose group (of one role) leaves the node.

    All groups of a role communicate at the same time, so that many flows
    share the node's inter-node link.
    """
    per_node: Counter[int] = Counter()
    for group in groups:
        nodes = {fabric.node(r) for r in group}
        if len(nodes) > 1:
            per_node.update(fabric.node(r) for r in group)
    return max(per_node.values(), default=1)
