"""NVIDIA's NCCL Inspector logs: JSON objects, one per collective (or p2p) per communicator.

Each process writes ``<host>-pid<PID>.log`` lines of ``header`` (communicator
hash ``id``, the process's ``rank`` in it, ``n_ranks``, ``nnodes``),
``metadata`` (format version, host, pid, dump time) and ``coll_perf`` (op,
``coll_sn``, message size, execution time, timing source; verbose adds
``event_trace_ts``: µs of gettimeofday for the enqueue and each channel's
kernel) or, from v4.1, ``p2p_perf``. The dump thread writes each
communicator's latest record every interval, so a record can repeat (kept
once) and ops between two dumps are never written: a log is a sample, said
as such where ``coll_sn`` has gaps.

A process is a global rank: its rank in a communicator that spans every
process (``n_ranks`` = the number of processes); a communicator's members are
the processes that logged it, its name its hash. Sizes follow commlens's
convention: Inspector's AllGather and ReduceScatter size is the per-rank
chunk, S is the whole buffer (chunk × n_ranks).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson

from commlens.errors import UsageError
from commlens.importers.clocks import align_ranks
from commlens.importers.commops import canonical_op
from commlens.importers.jsonstream import stream_error
from commlens.importers.model import Group, ImportedRun, Op, Provenance, RankTrace
from commlens.importers.registry import ImportOptions
from commlens.importers.sources import head_text, open_binary
from commlens.optable import COUNTED_BY_SHARE

NAME = "nccl-inspector"


def detect(path: Path) -> bool:
    text = head_text(path, 8192)
    return (
        '"header"' in text
        and '"metadata"' in text
        and ("inspector_output_format_version" in text or '"coll_perf"' in text)
    )


@dataclass
class _Record:
    comm: str
    comm_rank: int
    n_ranks: int
    host: str
    pid: int
    version: str
    dump_us: int
    kind: str  # "coll" or "p2p"
    name: str
    sn: int
    size: int
    exec_us: float
    source: str
    start_us: int | None
    stop_us: int | None
    peer: int | None


def _int(value: Any, default: int = -1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _record(obj: dict[str, Any]) -> _Record | None:
    header, meta = obj.get("header") or {}, obj.get("metadata") or {}
    perf, kind = obj.get("coll_perf"), "coll"
    if not isinstance(perf, dict):
        perf, kind = obj.get("p2p_perf"), "p2p"
    if not isinstance(perf, dict) or not isinstance(header, dict) or not isinstance(meta, dict):
        return None
    trace: dict[str, Any] = perf.get("event_trace_ts") or {}
    kernels = [k for k in trace.get("kernel_events") or [] if isinstance(k, dict)]
    starts = [_int(k.get("kernel_start_ts")) for k in kernels if _int(k.get("kernel_start_ts")) > 0]
    stops = [_int(k.get("kernel_stop_ts")) for k in kernels if _int(k.get("kernel_stop_ts")) > 0]
    prefix = "coll" if kind == "coll" else "p2p"
    peer = perf.get("p2p_peer")
    return _Record(
        comm=str(header.get("id", "")),
        comm_rank=_int(header.get("rank")),
        n_ranks=_int(header.get("n_ranks"), 0),
        host=str(meta.get("hostname", "")),
        pid=_int(meta.get("pid")),
        version=str(meta.get("inspector_output_format_version", "")),
        dump_us=_int(meta.get("dump_timestamp_us"), 0),
        kind=kind,
        name=str(perf.get(prefix, "")),
        sn=_int(perf.get(f"{prefix}_sn")),
        size=_int(perf.get(f"{prefix}_msg_size_bytes"), 0),
        exec_us=float(perf.get(f"{prefix}_exec_time_us") or 0.0),
        source=str(perf.get(f"{prefix}_timing_source", "")),
        start_us=min(starts) if starts else None,
        stop_us=max(stops) if stops else None,
        peer=_int(peer) if isinstance(peer, int) else None,
    )


def _records(path: Path) -> list[_Record]:
    out: list[_Record] = []
    try:
        with open_binary(path) as fh:
            for obj in ijson.items(fh, "", multiple_values=True, use_float=True):
                rec = _record(obj) if isinstance(obj, dict) else None
                if rec is not None:
                    out.append(rec)
    except (ijson.common.JSONError, OSError, EOFError, zlib.error) as exc:
        raise stream_error(path, exc) from None
    return out


def read(paths: list[Path], options: ImportOptions) -> ImportedRun:
    seen: dict[tuple[str, str, int, int, str, int], _Record] = {}
    repeats = 0
    for path in paths:
        for rec in _records(path):
            key = (rec.comm, rec.host, rec.pid, rec.comm_rank, rec.kind, rec.sn)
            if key in seen:
                repeats += 1
                continue
            seen[key] = rec
    if not seen:
        raise UsageError(f"{paths[0]}: no coll_perf or p2p_perf record (not an NCCL Inspector log)")
    records = list(seen.values())
    procs = sorted({(r.host, r.pid) for r in records})
    n_procs = len(procs)
    rank_of, how = _global_ranks(records, procs, options.world_size)
    world = options.world_size or max(n_procs, max(rank_of.values()) + 1)
    members: dict[str, dict[int, int]] = defaultdict(dict)  # comm -> comm rank -> global
    sizes_of: dict[str, int] = {}
    for r in records:
        members[r.comm][r.comm_rank] = rank_of[(r.host, r.pid)]
        sizes_of[r.comm] = r.n_ranks
    versions = sorted({r.version for r in records if r.version})
    prov = Provenance(
        NAME,
        format_version=", ".join(versions) or "?",
        files=[options.sources[p] for p in paths if p in options.sources],
    )
    run = ImportedRun(prov, world, backend="nccl")
    partial = []
    for comm, ranks in members.items():
        ordered = tuple(ranks[k] for k in sorted(ranks))
        run.groups[comm] = Group(comm, ordered, "NCCL communicator (hash)")
        if len(ordered) < sizes_of[comm]:
            partial.append(comm)
    timed = untimed = 0
    for r in sorted(records, key=lambda x: (x.comm, x.sn)):
        op_name = canonical_op(r.name)
        if op_name is None:
            continue
        grank = rank_of[(r.host, r.pid)]
        trace = run.ranks.setdefault(grank, RankTrace(grank, host=r.host, pid=r.pid))
        group = run.groups[r.comm]
        n = sizes_of[r.comm]
        size = r.size * n if op_name in COUNTED_BY_SHARE else r.size
        if r.start_us is not None and r.stop_us is not None:
            t_issue, t_end = r.start_us * 1000, r.stop_us * 1000
            timed += 1
        else:
            t_end = r.dump_us * 1000
            t_issue = max(0, t_end - round(r.exec_us * 1000))
            untimed += 1
        peer = None
        if r.peer is not None:
            peer = members[r.comm].get(r.peer)
        trace.ops.append(
            Op(
                op_name,
                t_issue,
                t_end,
                t_wait_ns=t_end - t_issue,
                pg_name=r.comm,
                pg_ranks=group.ranks,
                group_size=n,
                count=0,
                bytes_in=r.size,
                bytes_out=size if op_name == "all_gather" else r.size,
                size_bytes=size,
                peer=peer,
                api=f"inspector:{r.source or r.kind}",
                group_seq=r.sn if r.kind == "coll" else None,
            )
        )
    for trace in run.ranks.values():
        trace.files = [str(f.path) for f in prov.files]
    _say(run, records, how, partial, repeats, timed, untimed)
    align_ranks(run)
    return run


def _global_ranks(
    records: list[_Record], procs: list[tuple[str, int]], world: int | None
) -> tuple[dict[tuple[str, int], int], str]:
    """(host, pid) -> global rank: its rank in a communicator spanning every process."""
    n = world or len(procs)
    spans: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)
    for r in records:
        if r.n_ranks == n:
            spans[r.comm][(r.host, r.pid)] = r.comm_rank
    for comm, ranks in sorted(spans.items(), key=lambda kv: -len(kv[1])):
        if len(ranks) == len(procs) and len(set(ranks.values())) == len(ranks):
            return dict(ranks), f"ranks in the communicator {comm} that spans every process"
    return (
        {p: i for i, p in enumerate(procs)},
        "no communicator spans every process: ranks numbered by (host, pid) order",
    )


def _say(
    run: ImportedRun,
    records: list[_Record],
    how: str,
    partial: list[str],
    repeats: int,
    timed: int,
    untimed: int,
) -> None:
    prov = run.provenance
    prov.device_time = timed > 0
    prov.exposed = "the whole kernel time, an upper bound: the log has no compute kernels"
    prov.time_fields = {
        "clock": "each host's gettimeofday (µs)",
        "t_issue_ns": "the first channel's kernel start (event_trace_ts); without it the dump "
        "time less the execution time",
        "t_end_ns": "the last channel's kernel stop; without it the dump time (late by up to "
        "the dump interval)",
        "t_wait_ns": "the whole kernel time: the log has no compute kernels, so no overlap is "
        "known (an upper bound on the exposure)",
    }
    prov.notes.append(f"global ranks: {how}")
    if how.startswith("no communicator"):
        prov.estimated.append("global ranks (no communicator spans every process)")
    if untimed:
        prov.estimated.append(
            f"{untimed} ops without event_trace_ts: end = dump time, start = end - exec time"
        )
    prov.estimated.append("exposure: the whole kernel time (no compute kernels in the log)")
    gaps: list[str] = []
    by_comm: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for r in records:
        by_comm[(r.comm, r.host, r.pid)].append(r.sn)
    for (comm, host, pid), sns in sorted(by_comm.items()):
        span = max(sns) - min(sns) + 1
        if span > len(set(sns)):
            gaps.append(f"{comm} on {host}/{pid}: {len(set(sns))} of {span} sequence numbers")
    if gaps:
        prov.notes.append("a sample, not a log: " + "; ".join(gaps[:4]))
        prov.missing.append("ops between two dumps of a communicator (coll_sn gaps)")
    if repeats:
        prov.notes.append(f"{repeats} records written again by later dumps: kept once")
    if partial:
        run.warnings.append(
            f"{len(partial)} communicator(s) logged by fewer processes than their n_ranks: "
            "their rank lists hold only the processes seen"
        )
    prov.missing += ["process group names (communicator hashes instead)", "dtype", "steps"]
