"""A diagnosis's evidence from a commlens run: complete, killed or still hanging.

Every rank's events are its completed ops; ``inflight-NNNNN.json`` adds the
ops it had in flight at its last checkpoint (or as it closed), dropped where
the same op (group, op, issue time) was written as an event since. Each op's
seq is its index among the rank's collectives on its group (from 1), the
index by which c10d itself pairs them across ranks; a send or receive is
the k-th of its direction between the two ranks on its group. A member
misses collective *s* when it issued fewer than *s* collectives there, a
peer misses the k-th send when it issued fewer than k matching receives.

A rank's death comes from the launcher's exit codes (when commlens started
the ranks), else from a rank whose file still says ``running`` in a run that
ended; a stop asked by the user, or the hang watchdog's kill of the ranks
still alive when it fired, is no death.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from commlens.doctor.model import Evidence, Group, Op, RankFacts
from commlens.errors import RunFormatError
from commlens.safefile import read_bytes
from commlens.trace.layout import inflight_path, stacks_path
from commlens.trace.manifest import read_manifest

MAX_SIDE_FILE = 64 << 20
"""Largest in-flight or stacks file read (a rank's are kilobytes)."""
P2P = frozenset(("send", "recv", "send_object", "recv_object"))
ROOTED = frozenset(("broadcast", "reduce", "gather", "scatter"))
COLUMNS = ["op", "pg_name", "pg_ranks", "role", "dtype", "count", "bytes_in", "peer",
           "t_issue_ns", "t_end_ns", "t_wait_ns", "step"]  # fmt: skip


def _read_inflight(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    path = inflight_path(run_dir, rank)
    try:
        data = json.loads(read_bytes(path, limit=MAX_SIDE_FILE))
    except (OSError, ValueError):
        return []
    ops = data.get("ops") if isinstance(data, dict) else None
    return [o for o in ops if isinstance(o, dict)] if isinstance(ops, list) else []


def _facts(
    manifest_data: dict[str, Any], ranks: dict[int, Any], world: int
) -> dict[int, RankFacts]:
    from commlens.launch.signals import signal_name

    launcher = manifest_data.get("launcher")
    launcher = launcher if isinstance(launcher, dict) else {}
    raw_codes = launcher.get("exit_codes")
    codes: list[Any] = raw_codes if isinstance(raw_codes, list) else []
    raw_hang = manifest_data.get("hang")
    hang: dict[str, Any] = raw_hang if isinstance(raw_hang, dict) else {}
    stopped = bool(launcher.get("stopped_by"))
    by_watchdog = {r for r in hang.get("killed_ranks") or [] if isinstance(r, int)}
    ended = "exit_code" in launcher
    out: dict[int, RankFacts] = {}
    for rank in range(world):
        info = ranks.get(rank)
        status = info.status if info is not None else "no record"
        code = codes[rank] if rank < len(codes) and isinstance(codes[rank], int) else None
        sig = ""
        if code is not None and code < 0:
            sig, code = signal_name(-code), None
        if stopped or rank in by_watchdog:
            sig, code = "", None
            if rank in by_watchdog:
                status = "killed by the hang watchdog"
        elif code is None and not sig and ended and status == "running":
            status = "ended without closing its capture (killed)"
            sig = "an unknown signal"
        out[rank] = RankFacts(rank, status=status, exit_code=code, signal=sig,
                              recorded=info is not None,
                              host=info.host if info is not None else "")  # fmt: skip
    return out


def evidence_from_run(run_dir: Path) -> Evidence:
    """The evidence of the run in ``run_dir``."""
    from commlens.trace.reader import open_run

    manifest = read_manifest(run_dir)
    if not manifest.ranks:
        raise RunFormatError(f"{run_dir}: no rank recorded anything")
    world = manifest.world_size or (max(manifest.ranks) + 1)
    groups: dict[str, Group] = {}
    ops: dict[int, list[Op]] = {}
    steps: dict[int, list[tuple[int, int, int]]] = {}
    largest: tuple[float, str] | None = None
    with open_run(run_dir) as view:
        for rank in sorted(view.ranks):
            table = view.read_rank(rank, COLUMNS, dictionary=False, align=False)
            cols = {c: table.column(c).to_pylist() for c in COLUMNS}
            rows = [
                dict(zip(COLUMNS, values, strict=True))
                for values in zip(*cols.values(), strict=True)
            ]
            for row in rows:
                row["done"] = True
            if rows:
                waits = np.asarray(cols["t_wait_ns"], dtype=np.int64)
                i = int(waits.argmax())
                if largest is None or waits[i] / 1e9 > largest[0]:
                    r = rows[i]
                    largest = (
                        float(waits[i]) / 1e9,
                        f"rank {rank}, {r['op']} on group {r['pg_name']}, step {r['step']}",
                    )
            seen = {(r["pg_name"], r["op"], r["t_issue_ns"]) for r in rows}
            for o in _read_inflight(run_dir, rank):
                if (o.get("pg_name"), o.get("op"), o.get("t_issue_ns")) in seen:
                    continue
                rows.append({**{c: o.get(c) for c in COLUMNS}, "done": False,
                             "site": o.get("site", ""), "error": o.get("error", "")})  # fmt: skip
            rows.sort(key=lambda r: (int(r["t_issue_ns"] or 0), not r["done"]))
            ops[rank] = _ops(rank, rows, groups)
            info = manifest.ranks.get(rank)
            if info is not None:
                steps[rank] = [(w.step, w.t_start_ns, w.t_end_ns) for w in info.steps]
    _mark_missing(ops, groups)
    facts = _facts(manifest.data, manifest.ranks, world)
    stacks = {}
    for rank in range(world):
        try:
            raw = read_bytes(stacks_path(run_dir, rank), limit=MAX_SIDE_FILE)
            text = raw.decode(errors="replace")
        except OSError:
            continue
        if text.strip():
            stacks[rank] = text
    ev = Evidence(
        source="commlens run",
        path=str(run_dir),
        world_size=world,
        groups=groups,
        ops=ops,
        ranks=facts,
        stacks=stacks,
        steps=steps,
        largest_wait=largest,
        warnings=list(manifest.warnings),
    )
    if not any(not op.done for r in ops.values() for op in r):
        from commlens.doctor.straggle import straggle_rows

        ev.straggle = straggle_rows(run_dir, steps)
    return ev


def _ops(rank: int, rows: list[dict[str, Any]], groups: dict[str, Group]) -> list[Op]:
    counts: dict[tuple[Any, ...], int] = defaultdict(int)
    out = []
    for r in rows:
        name = str(r["pg_name"] or "")
        if name not in groups:
            groups[name] = Group(name, str(r.get("role") or ""), tuple(r["pg_ranks"] or ()))
        op = str(r["op"])
        p2p = op in P2P
        key = (name, op, r["peer"]) if p2p else (name,)
        counts[key] += 1
        out.append(
            Op(
                rank=rank,
                group=name,
                seq=counts[key],
                p2p=p2p,
                op=op,
                dtype=str(r["dtype"] or ""),
                bytes_in=int(r["bytes_in"] or 0),
                shape=f"{int(r['count'] or 0):,} elements",
                peer=None if r["peer"] is None else int(r["peer"]),
                done=bool(r["done"]),
                t_issue_ns=int(r["t_issue_ns"] or 0),
                t_end_ns=None if not r["done"] else int(r["t_end_ns"] or 0),
                step=int(r["step"]) if r.get("step") is not None else -1,
                site=str(r.get("site") or ""),
                error=str(r.get("error") or ""),
            )
        )
    return out


def _mark_missing(ops: dict[int, list[Op]], groups: dict[str, Group]) -> None:
    """Each op in flight gets the members that never issued their side of it."""
    from dataclasses import replace

    issued: dict[tuple[Any, ...], int] = defaultdict(int)
    for rank, mine in ops.items():
        for op in mine:
            key = (rank, op.group, op.op, op.peer) if op.p2p else (rank, op.group)
            issued[key] = max(issued[key], op.seq)
    for rank, mine in ops.items():
        for i, op in enumerate(mine):
            if op.done:
                continue
            if op.p2p:
                if op.peer is None:
                    continue
                other = "recv" if op.op.startswith("send") else "send"
                other += op.op[4:]  # send_object <-> recv_object
                missing: tuple[int, ...] = ()
                if issued[(op.peer, op.group, other, rank)] < op.seq:
                    missing = (op.peer,)
            else:
                members = groups.get(op.group, Group("", "", ())).ranks
                missing = tuple(m for m in members if m != rank and issued[(m, op.group)] < op.seq)
            mine[i] = replace(op, missing=missing)
