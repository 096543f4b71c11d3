"""How a run's backend moves its ops, as the replay and the costing see it.

A :class:`ReplayBackend` names what the replay charges for the backend the run
used: how many of a group's collectives run at once (gloo's worker threads),
whether a collective that spans nodes runs one flat ring over its members or
hierarchical rings (NCCL), whether the messages out of a node cross its one
link in the order they came (gloo's sockets), and whether ops run on streams of their
own, the CPU going on without them (NCCL on a GPU: the stream replay of
``whatif/streams.py``). The facts of each backend (workers, the ops it runs
as another) come from :mod:`commlens.optable`.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlens.optable import GLOO, NCCL, Backend


@dataclass(frozen=True)
class ReplayBackend:
    """What the replay charges for one backend (see the module docstring)."""

    facts: Backend
    """The backend's row of the op table (workers, ops it runs as another)."""
    flat_ring: bool
    """A collective whose group spans nodes runs one ring over its members in rank order
    at the inter-node rate, each op step by step on the host (gloo); else the cost
    model's hierarchical intra/inter split (NCCL)."""
    node_links: bool
    """Messages out of a node cross its one link in the order they came, and a send ends
    once its bytes are in the socket (gloo)."""
    streams: bool
    """Ops run on streams of their own and the CPU does not wait for them (NCCL on GPUs)."""
    assumption: str
    """What the replay assumes of this backend, in words ("" for none beyond the model)."""

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def workers(self) -> int:
        """Collectives of one group the replay runs at once."""
        return self.facts.workers if self.flat_ring else 1

    def op_as_run(self, op: str) -> str:
        """The op ``op`` is costed as (gloo runs a reduce-scatter as an all-reduce)."""
        return self.facts.op_as_run(op) if self.flat_ring else op


GLOO_REPLAY = ReplayBackend(
    GLOO,
    flat_ring=True,
    node_links=True,
    streams=False,
    assumption=(
        "gloo: a collective whose group spans nodes runs one flat ring over its members in "
        "rank order at the inter-node rate (gloo has no hierarchical algorithm); the ring's "
        "edges that leave a node share its link; a reduce-scatter costs an all-reduce (gloo "
        "has no native one); a send, like its receive, lasts until the link has carried its "
        "bytes (on average a send finds the socket buffer still holding the message before "
        "it and waits for the wire), and the channel carries one message at a time; a "
        "node's link carries its messages in the order they came (one that starts while "
        "another is on it goes after it; those that start together cross side by side, "
        f"sharing its rate); a group runs up to {GLOO.workers} ops at once (gloo's worker "
        "threads), the later one's bytes after the earlier's on the link"
    ),
)
NCCL_REPLAY = ReplayBackend(NCCL, flat_ring=False, node_links=False, streams=True, assumption="")


def replay_backend(name: str | None) -> ReplayBackend:
    """The :class:`ReplayBackend` of a run made with backend ``name``: gloo's, else
    NCCL's (a backend the table does not know runs one op at a time per group)."""
    return GLOO_REPLAY if name == GLOO.name else NCCL_REPLAY
