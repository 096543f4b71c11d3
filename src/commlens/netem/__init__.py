"""Emulated clusters: network namespaces as nodes, shaped links, NIC counters.

Typical use (as root)::

    with EmulatedCluster(nodes=2, link="1gbit") as cluster:
        launch_ranks(argv, 4, nodes=2, master_addr=cluster.master_addr,
                     placement=cluster.placement)

or, with NIC counters written to a run directory, :func:`launch_emulated`.
"""

from __future__ import annotations

from commlens.netem import iproute
from commlens.netem.cluster import EmulatedCluster
from commlens.netem.launch import EmulatedLaunchResult, launch_emulated
from commlens.netem.nic import NIC_FILE, NicSampler, link_utilization, read_nic
from commlens.netem.rate import format_rate, parse_rate
from commlens.netem.state import forget_owner, owner_alive, state_dir

__all__ = [
    "NIC_FILE",
    "EmulatedCluster",
    "EmulatedLaunchResult",
    "NicSampler",
    "cleanup",
    "format_rate",
    "launch_emulated",
    "link_utilization",
    "parse_rate",
    "read_nic",
]


def cleanup(*, force: bool = False) -> list[str]:
    """Remove leftovers of emulated runs (commlens's own prefix only); return their names.

    Runs whose owner process is still alive are kept unless ``force``.
    Raises :class:`~commlens.errors.UsageError` without root.
    """
    iproute.require_netns("removing emulated networks")
    removed: list[str] = []
    for run_id in sorted(iproute.run_ids_present()):
        if not force and owner_alive(run_id):
            continue
        removed += iproute.remove_run(run_id)
        forget_owner(run_id)
    for record in state_dir().glob("*.pid"):  # owners gone, nothing left: stale records
        if not owner_alive(record.stem) and record.stem not in iproute.run_ids_present():
            record.unlink(missing_ok=True)
    return removed
