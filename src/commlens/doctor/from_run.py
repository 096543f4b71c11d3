"""A diagnosis's evidence from a commlens run: complete, killed or still hanging.

Every rank's events are its completed ops; ``inflight-NNNNN.json`` adds the
ops it had in flight at its last checkpoint (or as it closed), dropped where
the same op (group, op, issue time) was written as an event since; a
completed op's call site comes from the rank's call-site files
(:mod:`commlens.trace.callsites`; none in a run without them). Each op's
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

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.analysis.spill import Spill, spill_dir
from commlens.doctor.model import Evidence, Group, Op, RankFacts, StepRuns
from commlens.doctor.straggle import LATE
from commlens.errors import RunFormatError
from commlens.optable import EQUAL_SIZES, P2P_OPS, ROOTED
from commlens.safefile import read_bytes
from commlens.trace.callsites import CallSites, read_callsites
from commlens.trace.inflight import MAX_SIDE_FILE, read_inflight
from commlens.trace.layout import stacks_path
from commlens.trace.manifest import read_manifest

COLUMNS = ["op", "pg_name", "pg_ranks", "role", "dtype", "count", "bytes_in", "peer",
           "t_issue_ns", "t_end_ns", "t_wait_ns", "step", "seq"]  # fmt: skip


def _inflight_ops(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    data = read_inflight(run_dir, rank)
    return data.ops if data is not None else []


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
    if hang.get("killed") and "killed_ranks" not in hang:  # a note that does not list them
        by_watchdog = set(range(world))
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


@dataclass
class _RankCols:
    """One rank's completed ops in issue order, as arrays (one entry per event)."""

    group: list[str]
    """group name of each group code"""
    names: list[str]
    """op name of each op code"""
    dtypes: list[str]
    g: np.ndarray
    o: np.ndarray
    d: np.ndarray
    peer: np.ndarray
    """-1 where none"""
    nbytes: np.ndarray
    count: np.ndarray
    t_issue: np.ndarray
    t_end: np.ndarray
    step: np.ndarray
    p2p: np.ndarray
    key: np.ndarray
    """the op's kind: its group (collectives), or its group, op and peer (sends and
    receives), one integer each"""
    seq: np.ndarray
    """per group (collectives) or per (group, op, peer) (sends and receives), from 1"""
    event_seq: np.ndarray
    """the event's own ``seq`` (the rank's sequence number)"""
    sites: CallSites


def _codes(table: Any, name: str) -> tuple[np.ndarray, list[str]]:
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(table.column(name)).combine_chunks()
    idx = enc.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return idx, [str(v or "") for v in enc.dictionary.to_pylist()] or [""]


def _running(keys: np.ndarray) -> np.ndarray:
    """For each position, 1 + how many earlier positions hold the same key."""
    out = np.zeros(keys.size, np.int64)
    if keys.size == 0:
        return out
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    starts = np.r_[0, np.flatnonzero(sk[1:] != sk[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, sk.size]))
    out[order] = np.arange(sk.size) - run_start + 1
    return out


def _rank_cols(table: Any, sites: CallSites) -> _RankCols:
    g, groups = _codes(table, "pg_name")
    o, names = _codes(table, "op")
    d, dtypes = _codes(table, "dtype")

    def ints(name: str, fill: int = 0) -> np.ndarray:
        return table.column(name).fill_null(fill).to_numpy(zero_copy_only=False).astype(np.int64)

    t_issue = ints("t_issue_ns")
    order = np.argsort(t_issue, kind="stable")
    g, o, d = g[order], o[order], d[order]
    peer = ints("peer", -1)[order]
    p2p = np.isin(o, [i for i, n in enumerate(names) if n in P2P_OPS])
    key = np.where(p2p, ((g * 64 + o) << 24) + peer + 1, g)
    key = np.where(p2p, -1 - key, key)  # collectives and point-to-point keys apart
    return _RankCols(groups, names, dtypes, g, o, d, peer, ints("bytes_in")[order],
                     ints("count")[order], t_issue[order], ints("t_end_ns")[order],
                     ints("step", -1)[order], p2p, key, _running(key), ints("seq", -1)[order],
                     sites)  # fmt: skip


def _row(c: _RankCols, i: int) -> dict[str, Any]:
    return {
        "pg_name": c.group[c.g[i]], "op": c.names[c.o[i]], "dtype": c.dtypes[c.d[i]],
        "bytes_in": int(c.nbytes[i]), "count": int(c.count[i]),
        "peer": None if c.peer[i] < 0 else int(c.peer[i]), "t_issue_ns": int(c.t_issue[i]),
        "t_end_ns": int(c.t_end[i]), "step": int(c.step[i]), "done": True, "seq": int(c.seq[i]),
        "site": c.sites.of(c.event_seq[i : i + 1])[0],
    }  # fmt: skip


def _signature(c: _RankCols, rows: np.ndarray, ids: dict[str, int]) -> np.ndarray:
    """(op, dtype, bytes where they must agree, root where there is one) per row."""
    op_names = np.array(c.names, dtype=object)[c.o[rows]]
    sized = np.isin(op_names, list(EQUAL_SIZES))
    rooted = np.isin(op_names, list(ROOTED))
    op_id = np.array([ids.setdefault("op:" + n, len(ids)) for n in c.names])[c.o[rows]]
    dt_id = np.array([ids.setdefault("dt:" + n, len(ids)) for n in c.dtypes])[c.d[rows]]
    return np.stack(
        [op_id, dt_id, np.where(sized, c.nbytes[rows], -1), np.where(rooted, c.peer[rows], -1)]
    )


@dataclass
class _Agreement:
    """The members of one group compared, one at a time, with its first member: where
    their collectives' signatures (:func:`_signature`) differ."""

    first: np.ndarray
    """the first member's signatures (4 x its collectives)"""
    bad: np.ndarray
    """per collective of the first member: some member's differs"""
    n: int
    """the fewest collectives of any member so far"""
    members: list[int]

    def add(self, rank: int, sig: np.ndarray) -> None:
        m = min(self.first.shape[1], sig.shape[1])
        self.bad[:m] |= (sig[:, :m] != self.first[:, :m]).any(axis=0)
        self.n = min(self.n, sig.shape[1])
        self.members.append(rank)

    def first_bad(self) -> int | None:
        """The first collective (index among each member's) where members disagree."""
        if len(self.members) < 2 or not self.bad[: self.n].any():
            return None
        return int(np.argmax(self.bad[: self.n]))


def _collective_rows(c: _RankCols, name: str) -> np.ndarray:
    """The rows of ``c``'s collectives on group ``name``, in issue order."""
    code = c.group.index(name) if name in c.group else -1
    return np.flatnonzero((c.g == code) & ~c.p2p)


def _largest_wait(
    rank: int, table: pa.Table, largest: tuple[float, str] | None
) -> tuple[float, str] | None:
    """The largest wait of ``rank``'s events if above ``largest``: (seconds, where)."""
    waits = table.column("t_wait_ns").fill_null(0).to_numpy(zero_copy_only=False)
    if not waits.size:
        return largest
    i = int(np.argmax(waits))
    if largest is not None and waits[i] / 1e9 <= largest[0]:
        return largest
    return (
        float(waits[i]) / 1e9,
        f"rank {rank}, {table.column('op')[i].as_py()} on group "
        f"{table.column('pg_name')[i].as_py()}, "
        f"step {table.column('step')[i].as_py()}",
    )


def _kept_rows(
    c: _RankCols, run_dir: Path, rank: int, groups: dict[str, Group]
) -> list[dict[str, Any]]:
    """``rank``'s last completed op of each kind (per group; per group, op and peer for
    point-to-point), then its ops in flight not among its events, numbered on."""
    _, from_end = np.unique(c.key[::-1], return_index=True)  # the last of each kind
    rows = [_row(c, int(i)) for i in np.sort(c.key.size - 1 - from_end)]
    counts = {(r["pg_name"], r["op"], r["peer"]) if r["op"] in P2P_OPS else (r["pg_name"],):
              r["seq"] for r in rows}  # fmt: skip
    flying = sorted(_inflight_ops(run_dir, rank), key=lambda o: int(o.get("t_issue_ns") or 0))
    if not flying:
        return rows
    done = set(zip(c.g.tolist(), c.o.tolist(), c.t_issue.tolist(), strict=True))
    g_code = {n: i for i, n in enumerate(c.group)}
    o_code = {n: i for i, n in enumerate(c.names)}
    for o in flying:
        name, op = str(o.get("pg_name") or ""), str(o.get("op") or "")
        if (g_code.get(name), o_code.get(op), o.get("t_issue_ns")) in done:
            continue
        if name not in groups:
            groups[name] = Group(name, str(o.get("role") or ""), tuple(o.get("pg_ranks") or ()))
        k = (name, op, o.get("peer")) if op in P2P_OPS else (name,)
        counts[k] = counts.get(k, 0) + 1
        rows.append({**{col: o.get(col) for col in COLUMNS}, "done": False,
                     "seq": counts[k], "site": o.get("site", ""),
                     "error": o.get("error", "")})  # fmt: skip
    return rows


def _stacks(run_dir: Path, world: int) -> dict[int, str]:
    """Each rank's dumped stacks that hold anything."""
    stacks = {}
    for rank in range(world):
        try:
            raw = read_bytes(stacks_path(run_dir, rank), limit=MAX_SIDE_FILE)
            text = raw.decode(errors="replace")
        except OSError:
            continue
        if text.strip():
            stacks[rank] = text
    return stacks


@dataclass
class _Read:
    """What one pass over a run's ranks gathers for the evidence (a rank's events are
    read as arrays and let go: memory holds one rank's events and a few numbers per
    collective)."""

    groups: dict[str, Group] = field(default_factory=dict)
    agreement: dict[str, _Agreement] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    """signature codes of ops and dtypes (:func:`_signature`)"""
    kept: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    coll_steps: dict[tuple[int, str], StepRuns] = field(default_factory=dict)
    arrivals: Spill | None = None
    """each rank's collectives' steps and arrivals, written to disk by group (chunk
    ``codes[group]``: :func:`commlens.doctor.straggle.lateness_by_step` reads them)"""
    codes: dict[str, int] = field(default_factory=dict)
    largest: tuple[float, str] | None = None

    def rank(self, view: Any, rank: int, run_dir: Path) -> None:
        """Read ``rank``'s events once: groups, largest wait, kept rows, arrivals, and
        its collectives' signatures against each group's first member's."""
        table = view.read_rank(rank, COLUMNS, dictionary=False, align=False)
        c = _rank_cols(table, read_callsites(run_dir, rank))
        self._learn_groups(table)
        self.largest = _largest_wait(rank, table, self.largest)
        self.kept[rank] = _kept_rows(c, run_dir, rank, self.groups)
        aligned = view.read_rank(rank, ["t_issue_ns"], align=True).column(0)
        arrive = aligned.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.argsort(
            table.column("t_issue_ns").fill_null(0).to_numpy(zero_copy_only=False),
            kind="stable",
        )  # the order of _rank_cols
        arrive = arrive[order]
        late: list[tuple[int, np.ndarray]] = []
        for code, name in enumerate(c.group):
            sel = (c.g == code) & ~c.p2p
            if sel.any():
                self.coll_steps[(rank, name)] = StepRuns.of(c.step[sel])
                rec = np.empty(np.count_nonzero(sel), LATE)
                rec["step"], rec["arrive"] = c.step[sel], arrive[sel]
                late.append((self.codes.setdefault(name, len(self.codes)), rec))
                sig = _signature(c, np.flatnonzero(sel), self.ids)
                agreement = self.agreement.get(name)
                if agreement is None:
                    self.agreement[name] = _Agreement(sig, np.zeros(sig.shape[1], bool),
                                                      sig.shape[1], [rank])  # fmt: skip
                else:
                    agreement.add(rank, sig)
        if late and self.arrivals is not None:
            chunk = np.concatenate([np.full(rec.size, g) for g, rec in late])
            self.arrivals.add(rank, chunk, np.concatenate([rec for _, rec in late]))

    def _learn_groups(self, table: pa.Table) -> None:
        """Each group's role and ranks as its first op in the rank's file gives them."""
        import pyarrow.compute as pc

        names = pc.dictionary_encode(table.column("pg_name")).combine_chunks()
        codes = names.indices.to_numpy(zero_copy_only=False)
        valid = pc.is_valid(names.indices).to_numpy(zero_copy_only=False)
        _, first = np.unique(np.where(valid, codes, -1), return_index=True)
        # a group's first op, and every op of no group name (each was looked at)
        rows = np.union1d(first[valid[first]], np.flatnonzero(~valid))
        picked = table.select(["pg_name", "pg_ranks", "role"]).take(pa.array(rows, pa.int64()))
        for name, members, role in zip(
            *(picked.column(i).to_pylist() for i in range(3)), strict=True
        ):
            if name not in self.groups:
                self.groups[str(name)] = Group(str(name), str(role or ""), tuple(members or ()))

    def mismatches(self, view: Any, run_dir: Path) -> None:
        """Where a group's members disagree, each member's op at the first collective
        that differs joins its kept rows (its events read again: this is rare)."""
        wanted: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for name, agreement in self.agreement.items():
            at = agreement.first_bad()
            if at is not None:
                for rank in agreement.members:
                    wanted[rank].append((name, at))
        self.agreement.clear()
        for rank, where in sorted(wanted.items()):
            table = view.read_rank(rank, COLUMNS, dictionary=False, align=False)
            c = _rank_cols(table, read_callsites(run_dir, rank))
            for name, at in where:
                self.kept[rank].append(_row(c, int(_collective_rows(c, name)[at])))


def evidence_from_run(run_dir: Path) -> Evidence:
    """The evidence of the run in ``run_dir``: per rank, the last op completed on each
    group, the ops in flight and, where a group's members disagree, their ops at the first
    such collective; the rest of the events is read as arrays, not kept (the collectives'
    arrivals written to disk, read back a group at a time)."""
    manifest = read_manifest(run_dir)
    if not manifest.ranks:
        raise RunFormatError(f"{run_dir}: no rank recorded anything")
    world = manifest.world_size or (max(manifest.ranks) + 1)
    with spill_dir() as folder:
        late = Spill(folder, "late", LATE)
        read = _Read(arrivals=late)
        try:
            ev = _evidence(run_dir, manifest, world, read)
        finally:
            late.close()
        if not any(not op.done for r in ev.ops.values() for op in r):
            from commlens.doctor.straggle import lateness_by_step, straggle_rows

            ev.straggle = straggle_rows(run_dir, ev.steps)
            ev.lateness = lateness_by_step(ev.groups, late.index, read.codes)
    return ev


def _evidence(run_dir: Path, manifest: Any, world: int, read: _Read) -> Evidence:
    """The evidence of the run in ``run_dir`` but its stragglers (one read of its ranks)."""
    from commlens.trace.reader import open_run

    steps: dict[int, list[tuple[int, int, int]]] = {}
    with open_run(run_dir) as view:
        for rank in sorted(view.ranks):
            read.rank(view, rank, run_dir)
            info = manifest.ranks.get(rank)
            if info is not None:
                steps[rank] = [(w.step, w.t_start_ns, w.t_end_ns) for w in info.steps]
        read.mismatches(view, run_dir)
    groups, kept = read.groups, read.kept
    ops = {rank: _ops(rank, rows) for rank, rows in kept.items()}
    _mark_missing(ops, groups)
    return Evidence(
        source="commlens run",
        path=str(run_dir),
        world_size=world,
        groups=groups,
        ops=ops,
        ranks=_facts(manifest.data, manifest.ranks, world),
        stacks=_stacks(run_dir, world),
        steps=steps,
        largest_wait=read.largest,
        coll_steps=read.coll_steps,
        warnings=list(manifest.warnings),
    )


def _ops(rank: int, rows: list[dict[str, Any]]) -> list[Op]:
    """The kept rows as ops, in issue order (each with its seq)."""
    out = []
    for r in sorted(rows, key=lambda r: (int(r["t_issue_ns"] or 0), not r["done"])):
        op = str(r["op"])
        out.append(
            Op(
                rank=rank,
                group=str(r["pg_name"] or ""),
                seq=int(r["seq"]),
                p2p=op in P2P_OPS,
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
