"""The corrections a builder of op times applies to the cost model's times, by name.

Each is one step, in the order listed, that states what it assumes and can be
switched off (``whatif --without NAME``): as a profiler's processors are
listed and each can be left out. Which op-times choices and backends use each
one is said beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from commlens.errors import UsageError


@dataclass(frozen=True)
class Correction:
    """One step a builder applies to the cost model's op times, and what it assumes."""

    name: str
    modes: tuple[str, ...]
    """The ``--op-times`` choices that apply it."""
    gloo_only: bool
    """Applied only where a backend runs flat rings step by step (gloo)."""
    assumption: str


CORRECTIONS: tuple[Correction, ...] = (
    Correction(
        "step-latency",
        ("fit", "delta"),
        True,
        "each algorithm step of a gloo op lasts its wire time plus the backend's step latency "
        "on this host (thread wake-up, syscalls, copies and reductions) plus the link's alpha "
        "(a profile fitted by bench --fit: its wire time plus the longer of the step latency "
        "and alpha, its alpha holding its host's latency); the latency is fitted from the "
        "run's latency-bound ops, less their wire time on the run's own link, and kept on "
        "every network",
    ),
    Correction(
        "worker-waits",
        ("fit",),
        True,
        "what a collective spent in the capture beside the next one on its group (gloo's "
        "workers, its bytes after the other's) is taken out of its time before the fit: it "
        "keeps its own share, by wire time, of the group's busy spell",
    ),
    Correction(
        "link-waits",
        ("fit",),
        True,
        "what a message waited in the capture for its node's link is taken out of its time "
        "before the fit: it keeps its own share, by bytes, of the link's busy spell",
    ),
    Correction(
        "cpu-terms",
        ("fit",),
        False,
        "an op's time on a network is that network's cost-model time for the op's real "
        "message size plus its kind's CPU term (alpha + beta x size per op, role and node "
        "span), fitted from the run's own measured op times minus the model's on its own "
        "link: only the link changes",
    ),
    Correction(
        "member-lags",
        ("fit",),
        False,
        "each member of a collective keeps its lag behind its own call's mean as captured, a "
        "send or receive its rank's mean lag for its kind",
    ),
    Correction(
        "wire-share",
        ("fit",),
        True,
        "what the own link's model over-explains within an op's wire time (a receive's "
        "negative term, a collective's negative level) is kept as a share of its wire time, "
        "which scales with the link, never more on a slower link than on its own",
    ),
    Correction(
        "unhidden",
        ("fit",),
        True,
        "what a collective took beyond the model on its own link shrinks on another network "
        "with the shorter of its wire and host time there, and never grows",
    ),
    Correction(
        "link-bucket",
        ("fit", "model", "delta"),
        False,
        "an emulated link's token bucket is kept through the replay: each node's bucket is "
        "full at the start, an op's bytes leaving the node take what it holds (those bytes "
        "cross at the rate of the link under the shaper, the rest at the link's rate) and "
        "it refills at the link's rate while the link is idle, so back-to-back transfers "
        "drain it",
    ),
)
"""The corrections, in the order a builder applies them."""


def corrections(skip: Iterable[str] = ()) -> frozenset[str]:
    """The names of the corrections switched on: all but ``skip`` (each a name of
    :data:`CORRECTIONS`, else one line naming them)."""
    names = {c.name for c in CORRECTIONS}
    off = set(skip)
    unknown = sorted(off - names)
    if unknown:
        raise UsageError(
            f"unknown correction {unknown[0]!r}; the corrections are "
            + ", ".join(c.name for c in CORRECTIONS)
        )
    return frozenset(names - off)
