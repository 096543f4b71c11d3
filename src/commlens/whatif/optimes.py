"""Op times: how long each op of a program lasts in one replay, and what frees its queue.

An :class:`OpTimes` is everything the replay is told about the ops: each
event's duration from its instance's start, when each instance frees its
queue, and (for a backend whose ops hold the links, gloo) which node link each
message crosses, how long each instance's bytes hold the link and how many of
a group's ops run at once (:class:`LinkUse`). The measured times
(:func:`measured_times`) reproduce the capture; the builders of
:mod:`~commlens.whatif.builders` make the times of a network, one per
``--op-times`` choice, each applying the corrections of
:data:`~commlens.whatif.corrections.CORRECTIONS` that are switched on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.whatif.durations import elapsed, measured_release
from commlens.whatif.model import Program


@dataclass(frozen=True)
class LinkUse:
    """How a backend's ops hold the links in a replay (gloo: its workers and sockets)."""

    workers: int
    """Collectives of one group that run at once (their bytes one after the other)."""
    links: np.ndarray | None = None
    """Per instance, the node link a message crosses, in the order the messages came (-1
    for none); None: no message waits for a link."""
    wire: np.ndarray | None = None
    """Per instance, seconds its bytes hold its link when they find the link idle (and
    its bucket full); None: 0."""
    queued_wire: np.ndarray | None = None
    """Per instance, seconds its bytes take when they follow another op's on the busy
    link, which did not refill its bucket (None: :attr:`wire`)."""
    bucket: Bucket | None = None
    """The token bucket of each node's inter-node link (an emulated link's), whose level
    the replay keeps; None: every op finds it as :attr:`wire` says."""
    link_wire: np.ndarray | None = None
    """Per instance, seconds of wire a message that crosses a node's link (:attr:`links`)
    takes at the link's rate, without the link's alpha or bucket: what the messages on
    one link share (with a :attr:`bucket`, its :attr:`Bucket.drawn`); None: its
    :attr:`wire`, else its time."""


@dataclass(frozen=True)
class Bucket:
    """The token bucket of every node's inter-node link (a shaped link: tbf).

    Levels are in seconds of the link's wire: a bucket holds up to :attr:`capacity_s`,
    fills at one second a second while its link is idle, and an op's bytes take
    :attr:`drawn` seconds from every bucket of :attr:`nodes`; the share of its credit
    the fullest-drained of them still holds decides its times between
    :attr:`OpTimes.duration` (a full bucket) and :attr:`OpTimes.drained` (an empty one).
    """

    capacity_s: float
    drawn: np.ndarray
    """Per instance, seconds of wire its bytes take from the bucket (its wire time
    without the bucket's credit)."""
    credit: np.ndarray
    """Per instance, seconds a full bucket saves it (the lesser of the bucket and
    :attr:`drawn`); 0 for one that does not leave its node."""
    nodes: list[tuple[int, ...]]
    """Per cost group, the nodes whose links its ops' bytes leave by."""


@dataclass(frozen=True)
class OpTimes:
    """How long each op lasts in one replay (see the module docstring)."""

    duration: np.ndarray
    """Per event, seconds from its instance's start to its end for its rank."""
    release: np.ndarray | None = None
    """Per instance, seconds from its start until the next op on its queue may start
    (None: when its last member ends)."""
    use: LinkUse | None = None
    """How the ops hold the links (None: they queue on their group only)."""
    drained: np.ndarray | None = None
    """Per event, its duration when its link's bucket is empty (with a
    :attr:`LinkUse.bucket`)."""

    def releases(self, prog: Program, drained: bool = False) -> np.ndarray:
        """:attr:`release`, or each instance's last member's duration (``drained``: of
        :attr:`drained`)."""
        if self.release is not None:
            return self.release
        durations = self.drained if drained and self.drained is not None else self.duration
        out = np.zeros(prog.instances)
        np.maximum.at(out, prog.inst, durations)
        return out


def measured_times(prog: Program, durations: np.ndarray | None = None) -> OpTimes:
    """The capture's own op times (``durations``: :func:`elapsed`'s, when already found):
    a replay with them gives back the captured timeline (the self-check)."""
    took = elapsed(prog) if durations is None else durations
    return OpTimes(took, measured_release(prog))
