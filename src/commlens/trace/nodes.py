"""The per-node facts of a multi-node run, and the topology the ranks report.

Each node's ``commlens trace`` writes only its own ``node-NNNNN.json`` (whole,
by rename) and touches it every :data:`HEARTBEAT_S` while its job runs, so a
node whose file says ``running`` and is older than :data:`LIVE_S` is gone.
:func:`combine_nodes` puts them into the manifest: ``nodes`` (slot -> host,
command, exit status), ``job`` (``job.json``), the command and exit code of
the job as a whole, and the topology from the ranks' own ``meta.launch``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from commlens.trace.layout import JOB_FILE, NODE_FILE, NODE_GLOB
from commlens.units import ascii_int

NODE_FORMAT = "commlens-run-node"
HEARTBEAT_S = 5.0
LIVE_S = 60.0
"""A ``running`` node file untouched for this long belongs to a node that is gone."""


def write_node(path: Path, data: dict[str, Any]) -> None:
    """Write one node's file whole (only that node ever writes it)."""
    from commlens.safefile import write_output

    text = json.dumps({"format": NODE_FORMAT, **data}, indent=1, sort_keys=True, default=str)
    write_output(path, text, within=path.parent)


def _read(path: Path) -> dict[str, Any] | None:
    from commlens.safefile import SMALL_LIMIT, read_json

    try:
        data = read_json(path, limit=SMALL_LIMIT, follow=False)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_job(run_dir: Path) -> dict[str, Any] | None:
    """``job.json`` of ``run_dir``, or None when it has none (or it is unreadable)."""
    return _read(run_dir / JOB_FILE)


def collect_nodes(run_dir: Path) -> dict[str, dict[str, Any]]:
    """slot (a decimal string) -> that node's facts, for every readable node file."""
    nodes: dict[int, dict[str, Any]] = {}
    for path in sorted(run_dir.glob(NODE_GLOB)):
        match = NODE_FILE.match(path.name)
        data = _read(path) if match and path.is_file() else None
        if data is not None and data.get("format") == NODE_FORMAT:
            data = {k: v for k, v in data.items() if k != "format"}
            nodes[int(match.group(1))] = data  # type: ignore[union-attr]
    return {str(slot): nodes[slot] for slot in sorted(nodes)}


def live_nodes(run_dir: Path) -> list[dict[str, Any]]:
    """The nodes of ``run_dir`` whose ``commlens trace`` is still running."""
    now = time.time()
    live = []
    for path in sorted(run_dir.glob(NODE_GLOB)):
        data = _read(path)
        try:
            fresh = now - path.stat().st_mtime < LIVE_S
        except OSError:
            continue
        if data is not None and data.get("status") == "running" and fresh:
            live.append(data)
    return live


@contextmanager
def heartbeat(path: Path) -> Iterator[None]:
    """Touch ``path`` every :data:`HEARTBEAT_S` while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                os.utime(path)
            except OSError:
                pass

    thread = threading.Thread(target=beat, name="commlens-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def cluster_topology(ranks: dict[str, Any]) -> dict[str, Any] | None:
    """The nodes and ranks per node, from the ranks' ``meta.launch`` (None: no rank has it)."""
    per_node: dict[str, list[int]] = {}
    hosts: dict[str, str] = {}
    for key, meta in ranks.items():
        inner = meta.get("meta") if isinstance(meta, dict) else None
        launch = inner.get("launch") if isinstance(inner, dict) else None
        if not isinstance(launch, dict) or ascii_int(key) is None:
            continue
        node = str(launch.get("node", launch.get("host", "")))
        per_node.setdefault(node, []).append(int(key))
        hosts[node] = str(launch.get("host", ""))
    if not per_node:
        return None
    order = sorted(per_node, key=lambda n: min(per_node[n]))
    counts = sorted({len(per_node[n]) for n in order})
    return {
        "kind": "cluster",
        "nodes": len(order),
        "ranks_per_node": counts[0] if len(counts) == 1 else [len(per_node[n]) for n in order],
        "node_ranks": {n: sorted(per_node[n]) for n in order},
        "hosts": {n: hosts[n] for n in order},
        "link": None,
        "intra_node": "unknown",
    }


def combine_nodes(run_dir: Path, manifest: dict[str, Any], *, fill_topology: bool) -> None:
    """Add the node files' facts and the ranks' topology to ``manifest`` (in place).

    Without node files (a single-node ``commlens trace``, a job launched with
    the capture's environment alone) the manifest is left as it is, but for
    ``fill_topology``: then a missing topology that the ranks say spans
    several nodes is filled in.
    """
    nodes = collect_nodes(run_dir)
    topology = cluster_topology(manifest.get("ranks") or {})
    if not nodes:
        if fill_topology and "topology" not in manifest and topology and topology["nodes"] > 1:
            manifest["topology"] = topology
        return
    manifest["nodes"] = nodes
    job = read_job(run_dir)
    if job is not None:
        manifest["job"] = job
    first = nodes[min(nodes, key=int)]
    if "command" in first:
        manifest["command"] = first["command"]
    codes = [n.get("exit_code") for n in nodes.values()]
    failed = [c for c in codes if isinstance(c, int) and c != 0]
    launcher = first.get("launcher")
    manifest["launcher"] = {
        **(launcher if isinstance(launcher, dict) else {}),
        "exit_code": None if None in codes else (failed[0] if failed else 0),
        "nodes_joined": len(nodes),
    }
    if topology is not None:
        manifest["topology"] = topology
        manifest["link"] = None
