"""The default demo: a 4-rank GPT under DP, TP and PP, on a slow and a fast link.

As root (network namespaces available): 2 emulated nodes × 2 ranks, over a
100 Mbit/s link and an unshaped one: Study A in a few minutes, whose finding
is that data parallelism gains much more from the faster link than model
parallelism. The summary says how far the measured numbers bear it out,
against the spread of each point's steps (:mod:`commlens.sweep.spread`).
Without root: the same three schemes on loopback, said so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from commlens.sweep.spec import SweepSpec, parse_spec

SLOW_LINK = "100mbit"

_COMMON = """
[sweep]
name = "demo"
title = "{title}"
nproc = 4
steps = 15
warmup_steps = 2
seq_len = 32
micro_batch = 1
networks = ["tcp-10g", "rdma-100g"]

[grid]
model = ["gpt-tiny"]
scheme = ["dp", "tp", "pp"]
{network}

[schemes.pp]
pp = 2
microbatches = 2
"""


@dataclass(frozen=True)
class DemoPlan:
    """What the demo runs, and why (root or not)."""

    spec: SweepSpec
    emulated: bool
    reason: str
    """One line: the network the demo uses and why."""


def emulation_available() -> tuple[bool, str]:
    """(True, '') when emulated nodes can be built here, else (False, why not)."""
    if os.geteuid() != 0:
        return False, "not root"
    from commlens.errors import UsageError
    from commlens.netem import iproute

    try:
        iproute.require_netns("the demo's emulated nodes")
    except UsageError as exc:
        return False, str(exc)
    return True, ""


def demo_plan(emulate: bool | None = None) -> DemoPlan:
    """The demo's sweep: emulated when possible (or as ``emulate`` says)."""
    ok, why = emulation_available() if emulate is None else (emulate, "asked for loopback")
    if ok:
        network = f'nodes = 2\nlink = ["{SLOW_LINK}", "unshaped"]'
        title = (
            "gpt-tiny on 4 ranks under DP, TP and PP, 2 emulated nodes x 2 ranks, "
            f"{SLOW_LINK} and unshaped links"
        )
        reason = f"2 emulated nodes × 2 ranks, links {SLOW_LINK} and unshaped"
    else:
        network = "nodes = 1"
        title = "gpt-tiny on 4 ranks under DP, TP and PP, loopback (no emulated links)"
        reason = (
            f"loopback only ({why}): emulated nodes and shaped links need root and "
            "network namespaces"
        )
    text = _COMMON.format(title=title, network=network)
    return DemoPlan(parse_spec(text, "demo"), ok, reason)
