"""Emulated clusters: network namespaces as nodes, shaped links, NIC counters.

Typical use (as root)::

    with EmulatedCluster(nodes=2, link="1gbit") as cluster:
        launch_ranks(argv, 4, nodes=2, master_addr=cluster.master_addr,
                     placement=cluster.placement)

or, with NIC counters written to a run directory, :func:`launch_emulated`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commlens.netem import iproute
from commlens.netem.cluster import EmulatedCluster
from commlens.netem.launch import EmulatedLaunchResult, launch_emulated
from commlens.netem.nic import NIC_FILE, NicSampler, link_utilization, read_nic
from commlens.netem.rate import format_rate, parse_rate
from commlens.netem.state import list_records, stale_pid_files, unreadable_records
from commlens.netem.teardown import remove_recorded

__all__ = [
    "NIC_FILE",
    "CleanupReport",
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


@dataclass
class CleanupReport:
    """What :func:`cleanup` removed and what it left alone (each with the reason)."""

    removed: list[str] = field(default_factory=list)
    """``"<kind> <name>"`` of each object deleted."""
    left: list[str] = field(default_factory=list)
    """``"<what> (<why>)"`` of each object or run kept."""
    failed: list[str] = field(default_factory=list)
    """Recorded objects of dead runs that could not be deleted (also in ``left``)."""


def cleanup(*, force: bool = False) -> CleanupReport:
    """Remove what the records of finished or dead emulated runs list, and nothing else.

    Only objects named in a run's record (:mod:`commlens.netem.state`) that
    still exist are removed. Runs whose owner process is still alive are kept
    unless ``force``. Namespaces and interfaces that merely look like
    commlens's (its naming pattern) but no record lists are left alone and
    reported. Raises :class:`~commlens.errors.UsageError` without root.
    """
    iproute.require_netns("removing emulated networks")
    # Names first, records second: an object is recorded before it is created,
    # so anything listed now that a run made is in the records read after.
    namespaces = [n for n in iproute.list_namespaces() if iproute.NETNS_RE.match(n)]
    kinds = iproute.interface_kinds()
    ifaces = [i for i in iproute.list_interfaces() if iproute.IFACE_RE.match(i)]
    report = CleanupReport()
    recorded: set[str] = set()
    for record in list_records():
        recorded.update(name for _, name in record.objects())
        if not force and record.owner_alive():
            report.left.append(
                f"run {record.run_id} (owner pid {record.owner_pid} still alive; --force to remove)"
            )
            continue
        done = remove_recorded(record)
        report.removed += done.removed
        report.left += done.left
        report.failed += done.failed
    for ns in namespaces:
        if ns not in recorded:
            report.left.append(f"namespace {ns} (no commlens record)")
    for iface in ifaces:
        if iface not in recorded:
            report.left.append(f"{kinds.get(iface) or 'interface'} {iface} (no commlens record)")
    for path in unreadable_records():
        report.left.append(f"record {path} (unreadable; its objects are unknown)")
    for path in stale_pid_files():  # owner files of an older commlens, owner gone
        path.unlink(missing_ok=True)
    return report
