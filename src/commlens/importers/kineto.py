"""PyTorch profiler (Kineto) traces: one Chrome JSON (``.gz`` too) per rank.

Each communication op comes from the CPU side, in the first of these that
the trace has:

- ``record_param_comms`` with its comm args (``Collective name``, element
  counts, dtype, group name/ranks/description; newer traces): op, sizes and
  group from the args (``wait`` skipped);
- otherwise the ``c10d::*`` op around it (older traces without comm args, and
  gloo, where torch 2.13 writes no ``record_param_comms``): op from its name,
  sizes from its ``Input Dims``, or from the execution trace beside it
  (:mod:`.et`, joined by record-function id or, when the trace has none, by
  the order of ``record_param_comms``, checked op by op), group the world
  when the trace does not say.

Its device interval is its NCCL/RCCL kernel's, joined by ``External id`` or
through the launch's correlation id to the CPU op that launched it (never by
kernel name: RCCL names every kernel ``ncclDevKernel_Generic``); gloo's ops
take the span of their ``gloo:*`` annotation on gloo's thread; an op with
neither keeps its CPU op's span. Steps come from ``ProfilerStep#N``, phases
from the autograd and optimizer annotations, modules from ``nn.Module``
annotations where recorded.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import re
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commlens.errors import UsageError
from commlens.importers import et as et_reader
from commlens.importers.clocks import align_ranks
from commlens.importers.commops import canonical_op, kernel_op, sizes
from commlens.importers.groups import parse_ranks, rebuild_ranks, role_of
from commlens.importers.kinetoscan import CpuOp, FileScan, Kernel, Spans, scan
from commlens.importers.model import Group, ImportedRun, Op, Provenance, RankTrace, dtype_of
from commlens.importers.registry import ImportOptions
from commlens.importers.sources import head_text

NAME = "kineto"
_RANK_IN_NAME = re.compile(r"(?:rank|worker|_r)[-_]?(\d+)", re.IGNORECASE)


def detect(path: Path) -> bool:
    text = head_text(path, 1 << 15)
    if '"traceEvents"' in text:
        return True
    return '"schemaVersion"' in text and (
        '"deviceProperties"' in text or '"distributedInfo"' in text
    )


@dataclass
class _Built:
    """One rank's ops as built, with what was said about them."""

    trace: RankTrace
    device: bool = False
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def read(paths: list[Path], options: ImportOptions) -> ImportedRun:
    kineto = [p for p in paths if not et_reader.detect(p)]
    ets = [p for p in paths if p not in kineto]
    if not kineto:
        raise UsageError(
            "no profiler trace among the sources (execution traces alone: --format et)"
        )
    scans = _scan_all(kineto, options.jobs)
    by_rank = _ranks_of(scans)
    world = _world_size(by_rank, options.world_size)
    _check_one_job(by_rank)
    et_by_pid, et_by_rank = et_reader.index(ets)
    prov = Provenance(source_format=NAME)
    run = ImportedRun(prov, world)
    backends = {str(s.top.get("distributedInfo", {}).get("backend", "")) for s in by_rank.values()}
    run.backend = ",".join(sorted(b for b in backends if b)) or "unknown"
    run.job = {
        "trace_ids": sorted(
            {str(s.top["trace_id"]) for s in by_rank.values() if "trace_id" in s.top}
        )
    }
    _collect_groups(run, by_rank.values())
    built: dict[int, _Built] = {}
    for rank, s in sorted(by_rank.items()):
        ets_here = et_by_pid.get(next(iter(sorted(s.pids)), -1)) if s.pids else None
        ets_here = ets_here or et_by_rank.get(rank)
        built[rank] = _build_rank(rank, s, run, ets_here, options.sources)
        run.ranks[rank] = built[rank].trace
    _provenance(run, by_rank, built, ets, options)
    align_ranks(run)
    return run


PARALLEL_BYTES = 64 << 20
"""Below this much input, starting worker processes costs more than it saves."""


def _scan_all(paths: list[Path], jobs: int) -> list[FileScan]:
    """Each file scanned once; in ``jobs`` processes when there is enough to read."""
    workers = min(len(paths), max(1, jobs), os.cpu_count() or 1)
    if workers <= 1 or sum(p.stat().st_size for p in paths) < PARALLEL_BYTES:
        return [scan(p) for p in paths]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(scan, paths))


def _ranks_of(scans: list[FileScan]) -> dict[int, FileScan]:
    out: dict[int, FileScan] = {}
    for s in scans:
        info = s.top.get("distributedInfo")
        rank = info.get("rank") if isinstance(info, dict) else None
        if not isinstance(rank, int):
            match = _RANK_IN_NAME.search(s.path.name) or re.search(r"(\d+)", s.path.name)
            if match is None:
                raise UsageError(
                    f"{s.path}: no rank in the trace (distributedInfo) nor in its name"
                )
            rank = int(match.group(1))
        if rank in out:
            raise UsageError(f"rank {rank} is in two files: {out[rank].path} and {s.path}")
        out[rank] = s
    return out


def _world_size(by_rank: dict[int, FileScan], given: int | None) -> int:
    sizes_seen = set()
    for s in by_rank.values():
        info = s.top.get("distributedInfo")
        if isinstance(info, dict) and isinstance(info.get("world_size"), int):
            sizes_seen.add(info["world_size"])
    if len(sizes_seen) > 1:
        raise UsageError(f"the files are of different jobs: world sizes {sorted(sizes_seen)}")
    world = given or (sizes_seen.pop() if sizes_seen else max(by_rank) + 1)
    if max(by_rank) >= world:
        raise UsageError(f"rank {max(by_rank)} is outside the world size {world}")
    return world


_JOB_GAP_US = 3600e6


def _check_one_job(by_rank: dict[int, FileScan]) -> None:
    """Files of two jobs: other backends or NCCL versions, or traces hours apart."""
    for key in ("backend", "nccl_version"):
        seen = {
            str(s.top["distributedInfo"].get(key))
            for s in by_rank.values()
            if isinstance(s.top.get("distributedInfo"), dict) and key in s.top["distributedInfo"]
        }
        if len(seen) > 1:
            raise UsageError(f"the files are of different jobs: {key} {' and '.join(sorted(seen))}")
    spans = []
    for rank, s in by_rank.items():
        times = [o.ts for o in s.rpc + s.c10d] + [w[1] for w in s.steps]
        if times:
            spans.append((min(times) * 1000 + _base_ns(s), rank))
    if spans:
        (lo, r_lo), (hi, r_hi) = min(spans), max(spans)
        if hi - lo > _JOB_GAP_US * 1000:
            raise UsageError(
                f"the files are of different jobs: rank {r_lo} and rank {r_hi} were traced "
                f"{(hi - lo) / 3.6e12:.1f} hours apart"
            )


def _base_ns(s: FileScan) -> int:
    base = s.top.get("baseTimeNanoseconds")
    return int(base) if isinstance(base, int) else 0


def _ns(s: FileScan) -> Callable[[float], int]:
    base = _base_ns(s)

    def to_ns(us: float) -> int:
        whole = int(us)
        return base + whole * 1000 + round((us - whole) * 1000)

    return to_ns


def _collect_groups(run: ImportedRun, scans: Any) -> None:
    for s in scans:
        info = s.top.get("distributedInfo")
        for pg in (info.get("pg_config") or []) if isinstance(info, dict) else []:
            if not isinstance(pg, dict) or "pg_name" not in pg:
                continue
            name = str(pg["pg_name"])
            ranks, cut = parse_ranks(pg.get("ranks"))
            desc = str(pg.get("pg_desc", ""))
            if name not in run.groups or (not cut and len(ranks) > len(run.groups[name].ranks)):
                run.groups[name] = Group(
                    name, ranks, desc, role_of(desc), str(pg.get("backend_config", ""))
                )


# -- one rank ------------------------------------------------------------------


def _group_of(
    args: dict[str, Any], run: ImportedRun, counts: dict[str, int]
) -> tuple[str, tuple[int, ...], str]:
    """(name, global ranks, role) of the op's group from record_param_comms args."""
    name = args.get("Process Group Name")
    if name is None:
        counts["group unknown: the world"] += 1
        return "0", tuple(range(run.world_size)), ""
    name = str(name)
    size_arg = args.get("Group size")
    size = size_arg if isinstance(size_arg, int) else 0
    ranks, cut = parse_ranks(args.get("Process Group Ranks"))
    if cut or (size and len(ranks) != size):
        known = run.groups.get(name)
        rebuilt = rebuild_ranks(args.get("Global rank start"), args.get("Global rank stride"), size)
        if known is not None and len(known.ranks) == size:
            ranks = known.ranks
            counts["group ranks rebuilt from pg_config"] += 1
        elif rebuilt is not None:
            ranks = rebuilt
            counts["group ranks rebuilt from start/stride"] += 1
    desc = str(args.get("Process Group Description", ""))
    group = run.groups.get(name)
    if group is None:
        group = run.groups[name] = Group(name, ranks, desc, role_of(desc))
    elif not group.ranks and ranks:
        group.ranks = ranks
    return name, ranks or group.ranks, group.role or role_of(desc)


def _world_group(run: ImportedRun) -> tuple[str, tuple[int, ...], str]:
    world = tuple(range(run.world_size))
    for g in run.groups.values():
        if g.ranks == world and g.desc in ("default_pg", ""):
            return g.name, world, g.role
    run.groups.setdefault("0", Group("0", world, "default_pg"))
    return "0", world, ""


def _op_from_rpc(o: CpuOp, run: ImportedRun, counts: dict[str, int]) -> Op | None:
    args = o.args
    name = args.get("Collective name")
    op = canonical_op(str(name)) if name is not None else None
    if op is None:
        return None
    dt = dtype_of(str(args.get("dtype", "")))
    dtype, elem = dt if dt else (str(args.get("dtype", "")).lower(), 0)
    pg_name, ranks, role = _group_of(args, run, counts)
    n_in = args.get("In msg nelems")
    n_out = args.get("Out msg nelems")
    n_in = n_in if isinstance(n_in, int) else 0
    n_out = n_out if isinstance(n_out, int) else None
    s = sizes(op, n_in, n_out, elem, len(ranks))
    if not elem and op != "barrier":
        counts["dtype unknown: bytes 0"] += 1
    peer = _peer(op, args, ranks)
    return Op(
        op,
        0,
        0,
        pg_name=pg_name,
        pg_ranks=ranks,
        group_size=len(ranks),
        role=role,
        dtype=dtype,
        count=s.count,
        bytes_in=s.bytes_in,
        bytes_out=s.bytes_out,
        size_bytes=s.size_bytes,
        peer=peer,
        api="record_param_comms",
    )


def _peer(op: str, args: dict[str, Any], ranks: tuple[int, ...]) -> int | None:
    for key in ("Dst Rank", "Src Rank", "Root Rank", "Root rank"):
        value = args.get(key)
        if isinstance(value, int) and value >= 0:
            return value
    return None


# c10d op -> (index of the input tensor in Input Dims, index of the output or None,
# index of a group-local peer/root in Concrete Inputs or None)
_C10D_ARGS: dict[str, tuple[int, int | None, int | None]] = {
    "all_reduce": (0, None, None),
    "broadcast": (0, None, 2),
    "reduce": (0, None, 2),
    "send": (0, None, 2),
    "recv": (0, None, 2),
    "barrier": (0, None, None),
}
_C10D_OUT_FIRST = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}


def _numel(dims: Any) -> int | None:
    """Elements of one Input Dims entry: a shape, or a list of shapes (TensorList)."""
    if not isinstance(dims, list) or not dims:
        return None if not isinstance(dims, list) else (None if dims == [] else 0)
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims)) if dims else 1
    total = 0
    for d in dims:
        n = _numel(d)
        if n is None:
            return None
        total += n
    return total


def _op_from_c10d(
    o: CpuOp, run: ImportedRun, counts: dict[str, int], world: tuple[str, tuple[int, ...], str]
) -> Op | None:
    op = canonical_op(o.name)
    if op is None:
        return None
    args = o.args
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    if op in _C10D_OUT_FIRST:  # (output, input, ...)
        at: tuple[int, int | None, int | None] = (1, 0, 3 if op in ("gather", "scatter") else None)
    else:
        at = _C10D_ARGS.get(op, (0, None, None))
    t_in, t_out, peer_at = at
    n_in = _numel(dims[t_in]) if len(dims) > t_in else None
    n_out = _numel(dims[t_out]) if t_out is not None and len(dims) > t_out else None
    dtype_text = str(types[t_in]) if len(types) > t_in else ""
    dt = dtype_of(dtype_text)
    pg_name, ranks, role = world
    counts["group not in the trace: the world assumed"] += 1
    peer = None
    concrete = args.get("Concrete Inputs") or []
    if peer_at is not None and len(concrete) > peer_at:
        try:
            local = int(concrete[peer_at])
            peer = ranks[local] if 0 <= local < len(ranks) else None
        except (TypeError, ValueError):
            peer = None
    result = Op(
        op,
        0,
        0,
        pg_name=pg_name,
        pg_ranks=ranks,
        group_size=len(ranks),
        role=role,
        dtype=dt[0] if dt else "",
        peer=peer,
        api=o.name,
    )
    if op != "barrier":
        result.count = n_in or 0
        result.bytes_out = n_out if n_out is not None else -1  # elements until the dtype is known
        if n_in is None:
            result.count = -1  # size from elsewhere (execution trace, gloo annotation)
    _set_bytes(result, dt[1] if dt else 0)
    return result


def _set_bytes(op: Op, elem: int) -> None:
    """Fill the byte columns of an op built from a c10d op once its element size is known."""
    if op.op == "barrier" or op.count < 0 or not elem:
        return
    n_out = op.bytes_out if op.bytes_out >= 0 else None
    s = sizes(op.op, op.count, n_out, elem, op.group_size)
    op.count, op.bytes_in, op.bytes_out, op.size_bytes = (
        s.count,
        s.bytes_in,
        s.bytes_out,
        s.size_bytes,
    )
    op.bytes_out = s.bytes_out


class _Enclosing:
    """The innermost CPU op of a list that contains a time on a thread."""

    def __init__(self, ops: list[tuple[CpuOp, Any]]) -> None:
        by_tid: dict[int, list[tuple[float, float, Any]]] = defaultdict(list)
        for o, value in ops:
            by_tid[o.tid].append((o.ts, o.end, value))
        self.by_tid = {t: sorted(v, key=lambda x: (x[0], -x[1])) for t, v in by_tid.items()}
        self.starts = {t: [x[0] for x in v] for t, v in self.by_tid.items()}

    def find(self, tid: int, t: float, limit: int = 64) -> Any:
        items = self.by_tid.get(tid)
        if not items:
            return None
        i = bisect.bisect_right(self.starts[tid], t) - 1
        stop = max(-1, i - limit)
        while i > stop:
            start, end, value = items[i]
            if start <= t <= end:
                return value
            i -= 1
        return None


def _span_label(spans: Spans, tid: int, t: float, index: dict[str, Any]) -> str | None:
    """The innermost span's label containing ``t`` on ``tid``."""
    if not len(spans.tid):
        return None
    if "by_tid" not in index:
        tids = np.frombuffer(spans.tid, dtype=np.int64)
        start = np.frombuffer(spans.start, dtype=np.float64)
        end = np.frombuffer(spans.end, dtype=np.float64)
        label = (
            np.frombuffer(spans.label, dtype=np.int64)
            if spans.label.itemsize == 8
            else np.array(spans.label, np.int64)
        )
        names = {v: k for k, v in spans.labels.items()}
        by_tid = {}
        for u in np.unique(tids):
            m = tids == u
            order = np.argsort(start[m], kind="stable")
            by_tid[int(u)] = (start[m][order], end[m][order], label[m][order])
        index["by_tid"], index["names"] = by_tid, names
    found = index["by_tid"].get(tid)
    if found is None:
        return None
    start, end, label = found
    i = int(np.searchsorted(start, t, side="right")) - 1
    stop = max(-1, i - 2000)
    while i > stop:
        if end[i] >= t:
            return str(index["names"][int(label[i])])
        i -= 1
    return None


def _build_rank(
    rank: int, s: FileScan, run: ImportedRun, et: et_reader.EtTrace | None, sources: dict[Path, Any]
) -> _Built:
    source = sources.get(s.path)
    trace = RankTrace(rank, host=str(s.top.get("host_name", "")), files=[_shown(s.path, source)])
    trace.pid = min(s.pids) if s.pids else None
    built = _Built(trace)
    counts = built.counts
    to_ns = _ns(s)
    world = _world_group(run)
    # 1. ops from the CPU side, each with the CPU ops that stand for it
    ops: list[tuple[Op, CpuOp]] = []
    owner: list[tuple[CpuOp, int]] = []  # CPU op -> index into ops
    c10d_at = _Enclosing([(c, i) for i, c in enumerate(s.c10d)])
    used_c10d: set[int] = set()
    et_records = et_reader.join(s.rpc, et) if et is not None else None
    if et is not None and et_records is None:
        run.warnings.append(
            f"rank {rank}: the execution trace could not be joined to {s.path.name} (its comm "
            "ops differ): sizes left unknown"
        )
    for k, o in enumerate(s.rpc):
        parent = c10d_at.find(o.tid, o.ts)
        op = _op_from_rpc(o, run, counts)
        rec = et_records[k] if et_records is not None else None
        if op is None and "Collective name" not in o.args:
            if rec is not None:
                op = et_reader.op_from_record(rec, world, counts)
            elif parent is not None:
                op = _op_from_c10d(s.c10d[parent], run, counts, world)
        if parent is not None:
            used_c10d.add(parent)
        if op is None:
            continue
        if rec is not None and op.count <= 0:
            et_reader.fill_sizes(op, rec)
        ops.append((op, o))
        owner.append((o, len(ops) - 1))
        if parent is not None:
            owner.append((s.c10d[parent], len(ops) - 1))
    for i, c in enumerate(s.c10d):
        if i in used_c10d:
            continue
        op = _op_from_c10d(c, run, counts, world)
        if op is None:
            continue
        ops.append((op, c))
        owner.append((c, len(ops) - 1))
    # 2. device intervals: kernels joined by External id or by their launch; the
    # kernel of a coalesced block (launched in its closing "coalesced" record) is
    # shared by the block's ops
    groups = _coalesced(s.rpc, ops)
    owners: list[tuple[CpuOp, int | tuple[int, ...]]] = [*owner, *groups]
    by_ext = {
        o.args.get("External id"): i
        for o, i in owners
        if isinstance(o.args.get("External id"), int) and o.name == "record_param_comms"
    }
    launches = s.launches()
    cpu_at = _Enclosing(owners)
    kernels_of: dict[int, list[Kernel]] = defaultdict(list)
    shared: list[tuple[tuple[int, ...], Kernel]] = []
    for kern in s.kernels:
        found = by_ext.get(kern.args.get("External id"))
        if found is None:
            launch = launches.get(int(kern.args.get("correlation", -1)))
            if launch is not None:
                found = cpu_at.find(launch[0], launch[1])
        if isinstance(found, tuple):
            shared.append((found, kern))
            continue
        if found is None:
            op = _op_from_kernel(kern, run, counts)
            if op is None:
                counts["comm kernel without an op (left out)"] += 1
                continue
            ops.append((op, CpuOp(kern.name, -1, kern.ts, kern.dur, kern.args)))
            found = len(ops) - 1
            counts["op from its kernel alone (no CPU op found)"] += 1
        kernels_of[found].append(kern)
    for block, kern in shared:  # a block's kernel goes to its ops that launched none
        alone = [i for i in block if i not in kernels_of]
        for member in alone:
            kernels_of[member].append(kern)
        counts["ops of a coalesced block sharing its kernel"] += len(alone)
    members: dict[int, list[int]] = defaultdict(list)  # kernel id -> ops sharing it
    for idx, ks in kernels_of.items():
        for kern in ks:
            members[id(kern)].append(idx)
    # 3. gloo annotations: the real execution interval of gloo's ops
    gloo = _match_gloo(ops, s.annotations)
    # 4. times, exposure, step, phase, module
    unions: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    steps = sorted(s.steps, key=lambda w: w[1])
    step_starts = [w[1] for w in steps]
    phase_index: dict[str, Any] = {}
    module_index: dict[str, Any] = {}
    autograd_tids = {t for t, n in s.thread_names.items() if "autograd" in n}
    for idx, (op, cpu) in enumerate(ops):
        ks = kernels_of.get(idx, [])
        if ks:
            start = min(k.ts for k in ks)
            end = max(k.end for k in ks)
            sharing = members[id(ks[0])]
            if len(sharing) > 1:  # one kernel for several ops (coalesced, batched p2p)
                start, end = _share(sharing, idx, start, end, ops)
                counts["kernel split among the ops that share it (by bytes)"] += 1
            device = ks[0].device
            if device not in unions:
                unions[device] = s.compute_union(device)
            overlap = _overlap(unions[device], start, end)
            op.t_issue_ns, op.t_end_ns = to_ns(start), to_ns(end)
            op.t_wait_ns = max(0, op.t_end_ns - op.t_issue_ns - round(overlap * 1000))
            op.device = f"device {device}"
            op.is_async = True
            built.device = True
            counts["kernel"] += 1
        elif idx in gloo:
            ann = gloo[idx]
            op.t_issue_ns, op.t_end_ns = to_ns(cpu.ts), to_ns(max(ann.end, cpu.end))
            op.t_wait_ns = round(cpu.dur * 1000)
            if op.count < 0 or not op.dtype:
                dims = (ann.args.get("Input Dims") or [None])[0]
                types = ann.args.get("Input type") or [""]
                dt = dtype_of(str(types[0]))
                if op.count < 0:
                    n = _numel(dims)
                    op.count = n if n is not None else -1
                if dt and not op.dtype:
                    op.dtype = dt[0]
                _set_bytes(op, dt[1] if dt else 0)
            counts["gloo annotation"] += 1
        else:
            op.t_issue_ns, op.t_end_ns = to_ns(cpu.ts), to_ns(cpu.end)
            op.t_wait_ns = op.t_end_ns - op.t_issue_ns
            counts["CPU op span"] += 1
        if op.count < 0:
            op.count = 0
            counts["size unknown (0)"] += 1
        if op.bytes_out < 0:
            op.bytes_out = 0
        if op.op != "barrier" and op.count > 0 and not op.size_bytes:
            counts["dtype unknown: bytes 0"] += 1
        t_cpu = cpu.ts
        k = bisect.bisect_right(step_starts, t_cpu) - 1
        if k >= 0 and t_cpu <= steps[k][2]:
            op.step = steps[k][0]
        phase = _span_label(s.phases, cpu.tid, t_cpu, phase_index)
        if phase is None and cpu.tid in autograd_tids:
            phase = "backward"
        op.phase = phase or "other"
        op.module = _span_label(s.modules, cpu.tid, t_cpu, module_index) or ""
    trace.ops = [op for op, _ in ops]
    trace.steps = [(n, to_ns(a), to_ns(b)) for n, a, b in steps]
    return built


def _coalesced(
    rpc: list[CpuOp], ops: list[tuple[Op, CpuOp]]
) -> list[tuple[CpuOp, tuple[int, ...]]]:
    """Each ``coalesced`` record_param_comms with the ops it closes: those issued on its
    thread since the previous one (``_coalescing_manager``, ``batch_isend_irecv``)."""
    out: list[tuple[CpuOp, tuple[int, ...]]] = []
    since: dict[int, float] = defaultdict(lambda: float("-inf"))
    for o in sorted(rpc, key=lambda x: x.ts):
        if str(o.args.get("Collective name", "")) != "coalesced":
            continue
        members = tuple(
            i
            for i, (_, cpu) in enumerate(ops)
            if cpu.tid == o.tid and since[o.tid] <= cpu.ts < o.ts and cpu.name == o.name
        )
        since[o.tid] = o.end
        if members:
            out.append((o, members))
    return out


def _shown(path: Path, source: Any) -> str:
    if source is None:
        return str(path)
    return f"{source.path}:{source.member}" if source.member else str(source.path)


def _op_from_kernel(kern: Kernel, run: ImportedRun, counts: dict[str, int]) -> Op | None:
    if "Collective name" in kern.args:
        return _op_from_rpc(CpuOp(kern.name, -1, kern.ts, kern.dur, kern.args), run, counts)
    name = kernel_op(kern.name)
    if name is None:
        return None
    counts["op named by its kernel only (size unknown)"] += 1
    g, ranks, role = _world_group(run)
    return Op(name, 0, 0, pg_name=g, pg_ranks=ranks, group_size=len(ranks), role=role, api="kernel")


def _share(
    members: list[int], idx: int, start: float, end: float, ops: list[tuple[Op, CpuOp]]
) -> tuple[float, float]:
    """``idx``'s part of a kernel that several ops share, in issue order, by bytes."""
    order = sorted(members, key=lambda i: ops[i][1].ts)
    weights = [max(ops[i][0].size_bytes, 1) for i in order]
    total = sum(weights)
    t = start
    for i, w in zip(order, weights, strict=True):
        span = (end - start) * w / total
        if i == idx:
            return t, t + span
        t += span
    return start, end


def _overlap(union: tuple[np.ndarray, np.ndarray], start: float, end: float) -> float:
    """µs of [start, end] covered by the union of compute intervals."""
    starts, ends = union
    if not len(starts) or end <= start:
        return 0.0
    lo = int(np.searchsorted(ends, start, side="right"))
    hi = int(np.searchsorted(starts, end, side="left"))
    if hi <= lo:
        return 0.0
    a = np.maximum(starts[lo:hi], start)
    b = np.minimum(ends[lo:hi], end)
    return float(np.clip(b - a, 0, None).sum())


_GLOO_OF = {"reduce_scatter": "all_reduce"}  # gloo runs reduce_scatter as an all_reduce


def _match_gloo(ops: list[tuple[Op, CpuOp]], anns: list[CpuOp]) -> dict[int, CpuOp]:
    """op index -> its ``gloo:*`` annotation: per kind, the earliest op issued before it
    and not yet matched, whose element count agrees when both are known."""
    gloo = sorted((a for a in anns if a.name.startswith("gloo:")), key=lambda a: a.ts)
    if not gloo:
        return {}
    waiting: dict[str, list[int]] = defaultdict(list)
    for idx, (op, _cpu) in sorted(enumerate(ops), key=lambda x: x[1][1].ts):
        waiting[_GLOO_OF.get(op.op, op.op)].append(idx)
    out: dict[int, CpuOp] = {}
    for ann in gloo:
        kind = canonical_op(ann.name)
        if kind is None:
            continue
        dims = (ann.args.get("Input Dims") or [None])[0]
        n = _numel(dims)
        queue = waiting.get(kind, [])
        for j, idx in enumerate(queue):
            op, cpu = ops[idx]
            if cpu.ts > ann.ts + 1:
                break
            if n is not None and op.count > 0 and op.count != n:
                continue
            out[idx] = ann
            del queue[j]
            break
    return out


# -- provenance ----------------------------------------------------------------


def _provenance(
    run: ImportedRun,
    by_rank: dict[int, FileScan],
    built: dict[int, _Built],
    ets: list[Path],
    options: ImportOptions,
) -> None:
    prov = run.provenance
    first = next(iter(by_rank.values()))
    version = [f"schemaVersion {first.top.get('schemaVersion', '?')}"]
    info = first.top.get("distributedInfo")
    if isinstance(info, dict) and info.get("nccl_version"):
        version.append(f"NCCL {info['nccl_version']}")
    has_args = any("Collective name" in o.args for s in by_rank.values() for o in s.rpc)
    has_rpc = any(s.rpc for s in by_rank.values())
    if has_args:
        version.append("comm args")
    elif has_rpc:
        version.append("old schema (no comm args)")
    else:
        version.append("no record_param_comms: c10d ops and gloo annotations")
    prov.format_version = ", ".join(version)
    prov.files = [
        options.sources[p] for s in by_rank.values() for p in [s.path] if p in options.sources
    ]
    prov.files += [options.sources[p] for p in ets if p in options.sources]
    device = any(b.device for b in built.values())
    prov.device_time = device
    base = (
        "baseTimeNanoseconds + ts"
        if any(_base_ns(s) for s in by_rank.values())
        else "ts, µs since the epoch"
    )
    if device:
        issue = "the op's start on its device (its GPU kernel's start); else its CPU op's start"
        end = "the GPU kernel's end; else the CPU op's end"
        wait = (
            "the comm kernel's time not overlapped by compute kernels on its device (the CPU "
            "does not wait on NCCL); without a kernel, the CPU op's duration"
        )
    else:
        issue = "the c10d CPU op's start (the call)"
        end = "the end of its gloo:* annotation (gloo's thread) when found, else the CPU op's end"
        wait = "the CPU op's own duration (the caller inside the call)"
    prov.time_fields = {
        "clock": f"the host's wall clock as the profiler wrote it ({base})",
        "t_issue_ns": issue,
        "t_end_ns": end,
        "t_wait_ns": wait,
        "step": "ProfilerStep#N window holding the CPU op; -1 outside every recorded step",
    }
    totals: dict[str, int] = defaultdict(int)
    for b in built.values():
        for k, v in b.counts.items():
            totals[k] += v
    for key, n in sorted(totals.items()):
        if key in ("kernel", "gloo annotation", "CPU op span"):
            prov.notes.append(f"{n} ops timed by: {key}")
        elif "unknown" in key or "left out" in key or "kernel only" in key:
            prov.missing.append(f"{n} ops: {key}")
        else:
            prov.estimated.append(f"{n} ops: {key}")
    stepped = sorted({w[0] for s in by_rank.values() for w in s.steps})
    if stepped:
        prov.notes.append(f"steps {stepped[0]}..{stepped[-1]} only (the profiler's active steps)")
    else:
        prov.missing.append("steps: no ProfilerStep#N in the traces (every op has step -1)")
    missing = run.missing_ranks()
    if missing:
        from commlens.trace.files import format_ranks

        prov.missing.append(f"ranks {format_ranks(missing)} of {run.world_size}: no trace given")
        options.warn(
            f"ranks {format_ranks(missing)} of {run.world_size} have no trace; the run is "
            "written without them"
        )
