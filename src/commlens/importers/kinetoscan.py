"""One pass over one PyTorch profiler (Kineto) trace file, keeping only what an import needs.

:func:`scan` streams the file's events (:mod:`.jsonstream`) and keeps the
communication CPU ops (``record_param_comms``, ``c10d::*``), the ``gloo:*``
and ``nccl:*`` annotations, the NCCL/RCCL kernels, the kernel launches'
correlation ids, the step windows and the spans that name phases and
modules. Every other kernel is kept as two numbers (its interval on its
device), for the comm kernels' overlap with compute. What is kept grows with
the number of kernels and comm ops, not with the rest of the trace.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commlens.importers.commops import is_comm_kernel
from commlens.importers.jsonstream import TraceStream

_KINDS = {
    "kernel": "kernel",
    "Kernel": "kernel",  # traces of 2021-2022 capitalised their categories
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "cuda_runtime": "launch",
    "cuda_driver": "launch",
    "hip_runtime": "launch",
    "hip_driver": "launch",
    "Runtime": "launch",
    "user_annotation": "annotation",
    "User annotation": "annotation",
    "python_function": "python",
}
"""Event category -> what the scan does with it; other categories are skipped."""
_PHASE_NAMES = {
    "## forward ##": "forward",
    "## backward ##": "backward",
    "## optimizer ##": "optimizer",
}


@dataclass
class CpuOp:
    """A CPU op or annotation kept by the scan (times in µs as the file has them)."""

    name: str
    tid: int
    ts: float
    dur: float
    args: dict[str, Any]

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Kernel(CpuOp):
    """A comm kernel: ``tid`` is its stream."""

    device: int = 0


@dataclass
class Spans:
    """Intervals on CPU threads that name a phase or a module, kept compactly."""

    tid: array = field(default_factory=lambda: array("q"))
    start: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    label: array = field(default_factory=lambda: array("l"))
    labels: dict[str, int] = field(default_factory=dict)

    def add(self, tid: int, ts: float, dur: float, label: str) -> None:
        lid = self.labels.setdefault(label, len(self.labels))
        self.tid.append(tid)
        self.start.append(ts)
        self.end.append(ts + dur)
        self.label.append(lid)


@dataclass
class FileScan:
    """What one trace file holds for an import."""

    path: Path
    top: dict[str, Any] = field(default_factory=dict)
    bytes: int = 0
    events: int = 0
    pids: set[int] = field(default_factory=set)
    rpc: list[CpuOp] = field(default_factory=list)
    c10d: list[CpuOp] = field(default_factory=list)
    annotations: list[CpuOp] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    compute: dict[int, tuple[array, array]] = field(default_factory=dict)
    compute_ids: dict[int, tuple[array, array]] = field(default_factory=dict)
    """Per device, each compute kernel's (stream, correlation), beside :attr:`compute`."""
    syncs: list[tuple[int, float, float]] = field(default_factory=list)
    """The CPU's blocking syncs (``cuda*Synchronize``): (tid, ts, dur)."""
    launch_corr: array = field(default_factory=lambda: array("q"))
    launch_tid: array = field(default_factory=lambda: array("q"))
    launch_ts: array = field(default_factory=lambda: array("d"))
    steps: list[tuple[int, float, float]] = field(default_factory=list)
    phases: Spans = field(default_factory=Spans)
    modules: Spans = field(default_factory=Spans)
    thread_names: dict[int, str] = field(default_factory=dict)

    def launches(self) -> dict[int, tuple[int, float]]:
        """correlation -> (tid, ts) of the launches of the kept comm kernels."""
        wanted = {int(k.args.get("correlation", -1)) for k in self.kernels}
        corr = np.frombuffer(self.launch_corr, dtype=np.int64) if len(self.launch_corr) else None
        if corr is None:
            return {}
        idx = np.nonzero(np.isin(corr, np.array(sorted(wanted), np.int64)))[0]
        return {int(corr[i]): (int(self.launch_tid[i]), float(self.launch_ts[i])) for i in idx}

    def all_launches(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every launch's (correlation, tid, ts), sorted by correlation."""
        corr = np.frombuffer(self.launch_corr, dtype=np.int64) if len(self.launch_corr) else None
        if corr is None:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
        order = np.argsort(corr, kind="stable")
        tid = np.frombuffer(self.launch_tid, dtype=np.int64)
        ts = np.frombuffer(self.launch_ts, dtype=np.float64)
        return corr[order], tid[order], ts[order]

    def compute_union(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of the compute kernels' intervals on ``device``, sorted, disjoint."""
        pair = self.compute.get(device)
        if pair is None or not len(pair[0]):
            return np.empty(0), np.empty(0)
        starts = np.frombuffer(pair[0], dtype=np.float64)
        ends = np.frombuffer(pair[1], dtype=np.float64)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends)
        new = np.ones(len(starts), bool)
        new[1:] = starts[1:] > reach[:-1]
        first = np.nonzero(new)[0]
        last = np.append(first[1:], len(starts)) - 1
        return starts[first], reach[last]


def _int(value: Any, default: int = -1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _annotation(out: FileScan, ev: dict[str, Any]) -> None:
    name, tid = ev["name"], ev.get("tid", -1)
    ts, dur = float(ev["ts"]), float(ev.get("dur", 0.0))
    if name.startswith("ProfilerStep#"):
        out.steps.append((int(name[13:]), ts, ts + dur))
    elif name.startswith(("gloo:", "nccl:")):
        out.annotations.append(CpuOp(name, tid, ts, dur, ev.get("args") or {}))
    elif name in _PHASE_NAMES:
        out.phases.add(tid, ts, dur, _PHASE_NAMES[name])
    elif name.startswith("Optimizer."):
        out.phases.add(tid, ts, dur, "optimizer")


def scan(path: Path) -> FileScan:
    """Read ``path`` once; keep what :mod:`.kineto` needs."""
    out = FileScan(path)
    stream = TraceStream(path)
    rpc, c10d, kernels = out.rpc, out.c10d, out.kernels
    compute, compute_ids = out.compute, out.compute_ids
    lc, lt, lts = out.launch_corr, out.launch_tid, out.launch_ts
    pids = out.pids
    n = 0
    thread_names = out.thread_names
    phases, modules = out.phases, out.modules
    for ev in stream.events():
        n += 1
        try:
            cat = _KINDS.get(ev.get("cat"))  # type: ignore[arg-type]
        except (AttributeError, TypeError):  # not an object, or a category not a string
            continue
        try:
            if cat == "kernel":
                name, args = ev["name"], ev.get("args") or {}
                ts, dur = float(ev["ts"]), float(ev.get("dur", 0.0))
                device = args.get("device", ev.get("pid", 0))
                if is_comm_kernel(name) or "Collective name" in args:
                    on = args.get("stream", ev.get("tid", 0))
                    kernels.append(Kernel(name, on, ts, dur, args, device))
                else:
                    pair = compute.get(device)
                    if pair is None:
                        pair = compute[device] = (array("d"), array("d"))
                        compute_ids[device] = (array("q"), array("q"))
                    pair[0].append(ts)
                    pair[1].append(ts + dur)
                    ids = compute_ids[device]
                    on, corr = args.get("stream"), args.get("correlation")
                    ids[0].append(on if type(on) is int else _int(ev.get("tid"), 0))
                    ids[1].append(corr if type(corr) is int else -1)
            elif cat == "cpu_op":
                name = ev["name"]
                if name == "record_param_comms" or name[:6] == "c10d::":
                    op = CpuOp(
                        name,
                        ev.get("tid", -1),
                        float(ev["ts"]),
                        float(ev.get("dur", 0.0)),
                        ev.get("args") or {},
                    )
                    (rpc if name == "record_param_comms" else c10d).append(op)
                    pid = ev.get("pid")
                    if isinstance(pid, int):
                        pids.add(pid)
                elif name[:35] == "autograd::engine::evaluate_function":
                    phases.add(ev.get("tid", -1), ev["ts"], ev.get("dur", 0.0), "backward")
                elif name[:10] == "Optimizer.":
                    phases.add(ev.get("tid", -1), ev["ts"], ev.get("dur", 0.0), "optimizer")
            elif cat == "launch":
                name = ev["name"]
                if "aunch" in name:
                    corr = (ev.get("args") or {}).get("correlation")
                    if isinstance(corr, int):
                        lc.append(corr)
                        lt.append(ev.get("tid", -1))
                        lts.append(ev["ts"])
                elif "Synchronize" in name:
                    out.syncs.append((ev.get("tid", -1), float(ev["ts"]), float(ev.get("dur", 0))))
            elif cat == "annotation":
                _annotation(out, ev)
            elif cat == "python":
                name = ev["name"]
                if name[:11] == "nn.Module: ":
                    modules.add(ev.get("tid", -1), ev["ts"], ev.get("dur", 0.0), name[11:])
            elif ev.get("ph") == "M" and ev.get("name") == "thread_name":
                thread_names[_int(ev.get("tid"))] = str((ev.get("args") or {}).get("name", ""))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue  # an event without the fields its kind needs (or of the wrong type)
    out.events = n
    out.top = stream.top
    out.bytes = stream.bytes
    return out
