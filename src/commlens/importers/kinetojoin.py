"""One rank's profiler trace as ops: CPU ops joined to their kernels and annotations.

:func:`build_rank` turns a :class:`~commlens.importers.kinetoscan.FileScan`
into the rank's ops: each from its CPU op (:mod:`.kinetoops`), its device
interval from its NCCL kernel (by ``External id``, else through its launch's
correlation id to the CPU op around the launch; the kernel of a coalesced
block shared by the block's ops, split by bytes), its exposure the part of
the kernel not overlapped by compute kernels on the device, gloo's ops timed
by their ``gloo:*`` annotation, and step, phase and module from the spans
around the CPU op.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commlens.importers import et as et_reader
from commlens.importers.commops import canonical_op
from commlens.importers.kinetokernels import kernel_table
from commlens.importers.kinetoops import (
    numel,
    op_from_c10d,
    op_from_kernel,
    op_from_rpc,
    set_bytes,
    world_group,
)
from commlens.importers.kinetoscan import CpuOp, FileScan, Kernel, Spans
from commlens.importers.model import ImportedRun, Op, RankTrace, dtype_of
from commlens.optable import GLOO


def base_ns(s: FileScan) -> int:
    base = s.top.get("baseTimeNanoseconds")
    return int(base) if isinstance(base, int) else 0


def _ns(s: FileScan) -> Callable[[float], int]:
    base = base_ns(s)

    def to_ns(us: float) -> int:
        whole = int(us)
        return base + whole * 1000 + round((us - whole) * 1000)

    return to_ns


@dataclass
class Built:
    """One rank's ops as built, with what was said about them."""

    trace: RankTrace
    device: bool = False
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))


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


def _cpu_ops(
    rank: int, s: FileScan, run: ImportedRun, et: et_reader.EtTrace | None,
    counts: dict[str, int],
) -> tuple[list[tuple[Op, CpuOp]], list[tuple[CpuOp, int]]]:  # fmt: skip
    """The ops from the CPU side, each with the CPU ops that stand for it (CPU op ->
    index into the ops)."""
    world = world_group(run)
    ops: list[tuple[Op, CpuOp]] = []
    owner: list[tuple[CpuOp, int]] = []
    c10d_at = _Enclosing([(c, i) for i, c in enumerate(s.c10d)])
    used_c10d: set[int] = set()
    joined = et_reader.join(s.rpc, et) if et is not None else None
    et_records, joined_by = joined if joined is not None else (None, "")
    if et is not None and et_records is None:
        run.warnings.append(
            f"rank {rank}: the execution trace could not be joined to {s.path.name} (its comm "
            "ops differ): sizes left unknown"
        )
    for k, o in enumerate(s.rpc):
        parent = c10d_at.find(o.tid, o.ts)
        op = op_from_rpc(o, run, counts)
        rec = et_records[k] if et_records is not None else None
        if op is None and "Collective name" not in o.args:
            if rec is not None:
                op = et_reader.op_from_record(rec, world, counts, joined_by)
            elif parent is not None:
                op = op_from_c10d(s.c10d[parent], run, counts, world)
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
        op = op_from_c10d(c, run, counts, world)
        if op is None:
            continue
        ops.append((op, c))
        owner.append((c, len(ops) - 1))
    return ops, owner


def _device_kernels(
    s: FileScan, run: ImportedRun, ops: list[tuple[Op, CpuOp]], owner: list[tuple[CpuOp, int]],
    counts: dict[str, int],
) -> dict[int, list[Kernel]]:  # fmt: skip
    """Each op's kernels, joined by External id or by their launch; the kernel of a
    coalesced block (launched in its closing "coalesced" record) is shared by the block's
    ops; a kernel no CPU op launched becomes an op of its own (appended to ``ops``)."""
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
            op = op_from_kernel(kern, run, counts)
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
    return kernels_of


def _on_device(
    idx: int, ops: list[tuple[Op, CpuOp]], ks: list[Kernel], sharing: list[int],
    union: tuple[np.ndarray, np.ndarray], to_ns: Callable[[float], int], counts: dict[str, int],
) -> None:  # fmt: skip
    """Time op ``idx`` by its kernels (split by bytes among the ops sharing one)."""
    op, cpu = ops[idx]
    start = min(k.ts for k in ks)
    end = max(k.end for k in ks)
    if len(sharing) > 1:  # one kernel for several ops (coalesced, batched p2p)
        start, end = _share(sharing, idx, start, end, ops)
        counts["kernel split among the ops that share it (by bytes)"] += 1
    overlap = _overlap(union, start, end)
    op.t_issue_ns, op.t_end_ns = to_ns(start), to_ns(end)
    op.t_wait_ns = max(0, op.t_end_ns - op.t_issue_ns - round(overlap * 1000))
    op.device = f"device {ks[0].device}"
    if cpu.tid != -1:  # a CPU op, not a kernel standing for its own op
        op.t_cpu_issue_ns = to_ns(cpu.ts)
    stream = ks[0].args.get("stream")
    op.stream = stream if isinstance(stream, int) and stream >= 0 else None
    op.is_async = True
    counts["kernel"] += 1


def _by_gloo(
    op: Op, cpu: CpuOp, ann: CpuOp, to_ns: Callable[[float], int], counts: dict[str, int]
) -> None:
    """Time ``op`` by gloo's annotation of its real execution; sizes from it if unknown."""
    op.t_issue_ns, op.t_end_ns = to_ns(cpu.ts), to_ns(max(ann.end, cpu.end))
    op.t_wait_ns = round(cpu.dur * 1000)
    if op.count < 0 or not op.dtype:
        dims = (ann.args.get("Input Dims") or [None])[0]
        types = ann.args.get("Input type") or [""]
        dt = dtype_of(str(types[0]))
        if op.count < 0:
            n = numel(dims)
            op.count = n if n is not None else -1
        if dt and not op.dtype:
            op.dtype = dt[0]
        set_bytes(op, dt[1] if dt else 0)
    counts["gloo annotation"] += 1


def build_rank(
    rank: int, s: FileScan, run: ImportedRun, et: et_reader.EtTrace | None, sources: dict[Path, Any]
) -> Built:
    source = sources.get(s.path)
    trace = RankTrace(rank, host=str(s.top.get("host_name", "")), files=[_shown(s.path, source)])
    trace.pid = min(s.pids) if s.pids else None
    built = Built(trace)
    counts = built.counts
    to_ns = _ns(s)
    # 1. ops from the CPU side, each with the CPU ops that stand for it
    ops, owner = _cpu_ops(rank, s, run, et, counts)
    # 2. device intervals
    kernels_of = _device_kernels(s, run, ops, owner, counts)
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
            device = ks[0].device
            if device not in unions:
                unions[device] = s.compute_union(device)
            _on_device(idx, ops, ks, members[id(ks[0])], unions[device], to_ns, counts)
            built.device = True
        elif idx in gloo:
            _by_gloo(op, cpu, gloo[idx], to_ns, counts)
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
    if built.device:
        trace.kernels = kernel_table(s, kernels_of, base_ns(s), to_ns)
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


def _match_gloo(ops: list[tuple[Op, CpuOp]], anns: list[CpuOp]) -> dict[int, CpuOp]:
    """op index -> its ``gloo:*`` annotation: per kind, the earliest op issued before it
    and not yet matched, whose element count agrees when both are known."""
    gloo = sorted((a for a in anns if a.name.startswith("gloo:")), key=lambda a: a.ts)
    if not gloo:
        return {}
    waiting: dict[str, list[int]] = defaultdict(list)
    for idx, (op, _cpu) in sorted(enumerate(ops), key=lambda x: x[1][1].ts):
        waiting[GLOO.op_as_run(op.op)].append(idx)
    out: dict[int, CpuOp] = {}
    for ann in gloo:
        kind = canonical_op(ann.name)
        if kind is None:
            continue
        dims = (ann.args.get("Input Dims") or [None])[0]
        n = numel(dims)
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
