"""Thin wrappers over ``ip`` and ``tc``, plus the names commlens gives its objects.

Every object an emulated run creates carries the run's id:

- network namespaces ``commlens-<id>-n<k>``;
- the bridge ``cl<id>br`` and host-side veths ``cl<id>h<k>`` (the node-side
  peer ``cl<id>n<k>`` lives inside the node's namespace).

``<id>`` is 6 lowercase hex digits, so interface names stay within Linux's
15-character limit for up to 10^6 nodes. The names only keep runs apart; what
a run may remove is what its record (:mod:`commlens.netem.state`) lists, never
whatever happens to match the pattern.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence

from commlens.errors import CommlensError, UsageError

NETNS_PREFIX = "commlens-"
IFACE_PREFIX = "cl"
ID_RE = r"[0-9a-f]{6}"
ID_RE_COMPILED = re.compile(ID_RE)
NETNS_RE = re.compile(rf"^{NETNS_PREFIX}(?P<id>{ID_RE})-n\d+$")
IFACE_RE = re.compile(rf"^{IFACE_PREFIX}(?P<id>{ID_RE})(br|h\d+|n\d+)$")


class IpError(CommlensError, RuntimeError):
    """An ``ip``/``tc`` command failed: the command and the first line of its stderr."""

    exit_code = 1


def run(args: Sequence[str], *, check: bool = True) -> str:
    """Run ``args`` and return stdout; raise :class:`IpError` on failure."""
    cmd = " ".join(args)
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    except OSError as exc:
        if not check:
            return ""
        raise IpError(f"`{cmd}` could not start: {exc.strerror or exc}") from None
    if check and proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        raise IpError(f"`{cmd}` failed: {lines[0] if lines else f'exit {proc.returncode}'}")
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
    """(namespaces, host interfaces) named after ``run_id`` (by pattern, not by record)."""
    netns = [n for n in list_namespaces() if (m := NETNS_RE.match(n)) and m["id"] == run_id]
    ifaces = [i for i in list_interfaces() if (m := IFACE_RE.match(i)) and m["id"] == run_id]
    return netns, ifaces


def interface_kinds() -> dict[str, str]:
    """Kind (``bridge``, ``veth``, ``dummy``, ... or ``""``) of each host interface."""
    out = run(["ip", "-j", "-d", "link", "show"], check=False) or "[]"
    try:
        links = json.loads(out)
    except ValueError:
        return {}
    return {
        str(link["ifname"]): str(link.get("linkinfo", {}).get("info_kind", ""))
        for link in links
        if "ifname" in link
    }


def delete_link(name: str) -> bool:
    """Delete host interface ``name`` (a veth takes its peer along); True when gone."""
    run(["ip", "link", "del", name], check=False)
    return name not in list_interfaces()


def delete_namespace(ns: str) -> bool:
    """Kill what runs inside ``ns``, then delete it; True when gone."""
    _kill_inside(ns)
    run(["ip", "netns", "del", ns], check=False)
    return ns not in list_namespaces()


def _kill_inside(ns: str) -> None:
    """SIGKILL processes still inside a node (orphaned ranks of a dead launcher)."""
    for pid in run(["ip", "netns", "pids", ns], check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass


def require_netns(what: str) -> None:
    """Raise :class:`UsageError` unless namespaces, veths and tc shaping can be used here."""
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
