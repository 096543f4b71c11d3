"""Thin wrappers over ``ip`` and ``tc``, plus the names commlens gives its objects.

Every object an emulated run creates carries the run's id, so leftovers can be
found and removed by commlens's own prefix and nothing else:

- network namespaces ``commlens-<id>-n<k>``;
- the bridge ``cl<id>br`` and host-side veths ``cl<id>h<k>`` (the node-side
  peer ``cl<id>n<k>`` lives inside the node's namespace).

``<id>`` is 6 lowercase hex digits, so interface names stay within Linux's
15-character limit for up to 10^6 nodes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence

from commlens.errors import UsageError

NETNS_PREFIX = "commlens-"
IFACE_PREFIX = "cl"
ID_RE = r"[0-9a-f]{6}"
ID_RE_COMPILED = re.compile(ID_RE)
NETNS_RE = re.compile(rf"^{NETNS_PREFIX}(?P<id>{ID_RE})-n\d+$")
IFACE_RE = re.compile(rf"^{IFACE_PREFIX}(?P<id>{ID_RE})(br|h\d+|n\d+)$")


class IpError(RuntimeError):
    """An ``ip``/``tc`` command failed (the message holds its stderr)."""


def run(args: Sequence[str], *, check: bool = True) -> str:
    """Run ``args`` and return stdout; raise :class:`IpError` on failure."""
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        raise IpError(f"{' '.join(args)}: {err[-1] if err else f'exit {proc.returncode}'}")
    return proc.stdout


def namespace_name(run_id: str, node: int) -> str:
    return f"{NETNS_PREFIX}{run_id}-n{node}"


def bridge_name(run_id: str) -> str:
    return f"{IFACE_PREFIX}{run_id}br"


def host_veth(run_id: str, node: int) -> str:
    return f"{IFACE_PREFIX}{run_id}h{node}"


def node_veth(run_id: str, node: int) -> str:
    return f"{IFACE_PREFIX}{run_id}n{node}"


def list_namespaces() -> list[str]:
    """Names of all network namespaces known to ``ip netns``."""
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_interfaces() -> list[str]:
    """Names of all network interfaces in this (the host's) namespace."""
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []


def run_ids_present() -> set[str]:
    """Ids of emulated runs that still have a namespace or an interface here."""
    ids = {m["id"] for name in list_namespaces() if (m := NETNS_RE.match(name))}
    ids |= {m["id"] for name in list_interfaces() if (m := IFACE_RE.match(name))}
    return ids


def objects_of(run_id: str) -> tuple[list[str], list[str]]:
    """(namespaces, host interfaces) that belong to the run ``run_id``."""
    netns = [n for n in list_namespaces() if (m := NETNS_RE.match(n)) and m["id"] == run_id]
    ifaces = [i for i in list_interfaces() if (m := IFACE_RE.match(i)) and m["id"] == run_id]
    return netns, ifaces


def remove_run(run_id: str) -> list[str]:
    """Delete every namespace and interface of ``run_id``; return what was removed."""
    netns, ifaces = objects_of(run_id)
    removed: list[str] = []
    # Veths first (deleting one end removes its peer), then the bridge.
    for iface in sorted(ifaces, key=lambda name: name.endswith("br")):
        if iface not in list_interfaces():  # went away with its peer
            removed.append(iface)
            continue
        run(["ip", "link", "del", iface], check=False)
        if iface not in list_interfaces():
            removed.append(iface)
    for ns in netns:
        _kill_inside(ns)
        run(["ip", "netns", "del", ns], check=False)
        if ns not in list_namespaces():
            removed.append(ns)
    return removed


def _kill_inside(ns: str) -> None:
    """SIGKILL processes still inside a node (orphaned ranks of a dead launcher)."""
    for pid in run(["ip", "netns", "pids", ns], check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass


def require_netns(what: str) -> None:
    """Raise :class:`UsageError` unless namespaces, veths and tbf can be used here."""
    problem = _netns_problem()
    if problem:
        raise UsageError(f"{what} needs {problem}; run as root on Linux, or drop --link/--nodes")


def _netns_problem() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the '{tool}' command (iproute2)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, check=False)
    if probe.returncode != 0:
        return "network namespace support (ip netns failed)"
    return None
