"""Removing exactly what a run's record lists (see :mod:`commlens.netem.state`).

Used by the cluster on exit, by the reaper when the owner died, and by
``commlens net cleanup``. An object is removed only if it is named in the
record, still exists and is still of the kind the run made; names go out of
the record as their objects go, and the record itself once it lists nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commlens.netem import iproute
from commlens.netem.state import RunRecord, forget_owner

_SINGULAR = {"namespaces": "namespace", "bridges": "bridge", "veths": "veth"}


@dataclass
class Teardown:
    """What removing one record did: ``"<kind> <name>"`` removed, and left alone with why."""

    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """The part of ``left`` that commlens made but could not delete."""


def remove_recorded(record: RunRecord) -> Teardown:
    """Delete the record's objects that still exist: veths, then bridges, then namespaces."""
    done = Teardown()
    for kind in ("veths", "bridges"):
        for name in list(getattr(record, kind)):
            what = f"{_SINGULAR[kind]} {name}"
            kinds = iproute.interface_kinds()
            if name not in kinds:  # never created, or went away (a veth with its peer)
                record.discard(kind, name)
            elif kinds[name] != _SINGULAR[kind]:
                done.left.append(
                    f"{what} (now a {kinds[name] or 'plain'} interface, not commlens's)"
                )
                record.discard(kind, name)
            elif iproute.delete_link(name):
                done.removed.append(what)
                record.discard(kind, name)
            else:
                done.left.append(f"{what} (ip link del failed)")
                done.failed.append(what)
    for ns in list(record.namespaces):
        what = f"namespace {ns}"
        if ns not in iproute.list_namespaces():
            record.discard("namespaces", ns)
        elif iproute.delete_namespace(ns):
            done.removed.append(what)
            record.discard("namespaces", ns)
        else:
            done.left.append(f"{what} (ip netns del failed)")
            done.failed.append(what)
    if not record.objects():
        forget_owner(record.run_id)
    return done
