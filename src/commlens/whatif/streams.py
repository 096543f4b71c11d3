"""Replay of a run imported from GPU profiler traces, stream by stream.

A run imported from PyTorch profiler traces of an NCCL job (time semantics
``device``, with its kernels file per rank: :mod:`commlens.trace.kernels`) is
replayed as its GPUs ran it, not as a CPU blocked in each call:

- every kernel, compute and communication, runs on its own stream, in the
  stream's order, no earlier than the CPU launched it;
- a collective's kernel starts on a rank once its stream is free and the work
  queued on the issuing stream before the op was issued is done (ProcessGroupNCCL
  makes its stream wait for the current one); its transfer starts when the last
  member's kernel has started, and takes the op's time (measured, or a network's
  cost-model time) from there;
- the CPU does not wait for NCCL: it launches as measured, except after a blocking
  sync (``cudaStreamSynchronize`` and the like), which returns when the kernel it
  waited for ends and moves the thread's later launches by as much;
- a kernel the trace shows waiting on another stream's kernel (see
  :data:`ASSUMPTIONS`: the trace holds no dependency edges) waits for it again.

Each time is the latest of its causes plus the gap the capture shows after that
latest cause (a launch latency, a kernel's gap behind its predecessor), so the
replay with the measured op times gives back every measured time exactly, and on
another network only the ops' times change: what they delay follows.

:func:`applies` says whether a run is one; :func:`stream_study` answers the
``whatif`` question for it with the :class:`~commlens.whatif.study.Study` every
other replay gives.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commlens.errors import UsageError
from commlens.predict.profiles import NetworkProfile
from commlens.predict.topology import Fabric
from commlens.trace.kernels import COMM, COMPUTE, SYNC, as_numpy, has_kernels, read_kernels
from commlens.trace.manifest import DEVICE_TIMES, time_semantics
from commlens.whatif.backend import NCCL_REPLAY
from commlens.whatif.costing import modelled
from commlens.whatif.critical import PathShare
from commlens.whatif.model import Program
from commlens.whatif.results import Figures, OpRow
from commlens.whatif.source import Trace

if TYPE_CHECKING:
    from commlens.whatif.study import Placement, Study

DEPENDENCY_WINDOW_NS = 10_000
"""A kernel that starts within this long after another stream's kernel ended, and
later than its own stream and launch allow, is taken to have waited for it."""

NO_SOURCE = -1


@dataclass
class StreamProgram:
    """The run as times that each wait for their causes (see the module docstring).

    Time ``q`` is ``max(value[src] + add for (src, add) in terms[q]) + gap[q]``
    (``src`` :data:`NO_SOURCE`: the constant ``add``); :attr:`order` lists the
    times so that every cause comes first. Times are integer nanoseconds.
    """

    terms: list[list[tuple[int, int]]] = field(default_factory=list)
    gap: list[int] = field(default_factory=list)
    measured: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    op_end: dict[int, int] = field(default_factory=dict)
    """Event index (the trace's) -> the time of its op's end on that rank."""
    op_start: dict[int, int] = field(default_factory=dict)
    """Event index -> the time its kernel starts on that rank."""
    transfer: dict[int, list[int]] = field(default_factory=dict)
    """Event index -> the kernel-start times of its instance's members."""
    kernels: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """(rank, start time, end time, is comm, measured CPU launch, else start) of every kernel."""
    syncs: list[tuple[int, int, int]] = field(default_factory=list)
    """(rank, measured call, return time) of every CPU sync."""
    edges: int = 0
    """Dependencies between streams read from the timing (not in the trace)."""
    issue_edges: int = 0
    unexplained: int = 0
    """Kernels that started later than every known cause (gap kept as measured)."""
    fixed_ops: int = 0
    """Ops without a kernel: their measured times are kept."""

    def add(self, measured: int) -> int:
        self.terms.append([])
        self.gap.append(0)
        self.measured.append(int(measured))
        return len(self.measured) - 1

    def settle(self, q: int, terms: list[tuple[int, int]], gap: int | None = None) -> None:
        """Give ``q`` its causes; its gap is what the capture shows beyond them."""
        self.terms[q] = terms
        if gap is None:
            latest = max((self._measured_term(s, a) for s, a in terms), default=None)
            gap = 0 if latest is None else self.measured[q] - latest
        self.gap[q] = gap

    def _measured_term(self, src: int, add: int) -> int:
        return add if src == NO_SOURCE else self.measured[src] + add

    def evaluate(self, gaps: dict[int, int] | None = None) -> list[int]:
        """Every time, with the gaps of ``gaps`` (q -> gap) in place of the captured."""
        value = [0] * len(self.measured)
        gap = self.gap
        for q in self.order:
            best: int | None = None
            for src, add in self.terms[q]:
                t = add if src == NO_SOURCE else value[src] + add
                if best is None or t > best:
                    best = t
            g = gaps.get(q, gap[q]) if gaps else gap[q]
            value[q] = (self.measured[q] if best is None else best) + (g if best is not None else 0)
        return value

    def sort(self) -> None:
        """:attr:`order`: causes first (Kahn's algorithm); a cycle is an error."""
        n = len(self.measured)
        users: list[list[int]] = [[] for _ in range(n)]
        need = [0] * n
        for q, terms in enumerate(self.terms):
            for src, _ in terms:
                if src != NO_SOURCE:
                    users[src].append(q)
                    need[q] += 1
        ready = sorted((q for q in range(n) if need[q] == 0), key=lambda q: -self.measured[q])
        order: list[int] = []
        while ready:
            q = ready.pop()
            order.append(q)
            for u in users[q]:
                need[u] -= 1
                if need[u] == 0:
                    ready.append(u)
        if len(order) != n:
            raise UsageError("the run's streams wait on each other in a cycle; cannot replay them")
        self.order = order


def applies(trace: Trace, path: str | Path) -> bool:
    """True for a run imported from GPU profiler traces with its kernels recorded."""
    if time_semantics(trace.manifest) != DEVICE_TIMES:
        return False
    return has_kernels(Path(path), sorted(set(trace.rank.tolist())))


def build(path: str | Path, prog: Program) -> StreamProgram:
    """The stream program of the run in ``path``, whose events ``prog`` holds (after its
    clock check: the kernels move with their rank's events)."""
    from commlens.trace.reader import open_run

    tr = prog.trace
    sp = StreamProgram()
    bounds = np.searchsorted(tr.rank, np.arange(tr.world_size + 1))
    with open_run(path, quiet=True) as view:
        tables = {
            r: read_kernels(Path(path), r, view.clocks.get(r))
            for r in range(tr.world_size)
            if bounds[r] < bounds[r + 1]
        }
        seqs = {r: np.sort(view.read_rank(r, ["seq"]).column(0).to_numpy()) for r in tables}
    shifts = prog.clock_shifts
    comm_start: dict[int, int] = {}
    for r, table in tables.items():
        _build_rank(sp, r, table, int(shifts[r]), seqs[r], int(bounds[r]), comm_start)
    members_of = _members(prog)
    for e in comm_start:
        members = [comm_start.get(int(m)) for m in members_of[int(prog.inst[e])]]
        starts = [m for m in members if m is not None]
        sp.transfer[e] = starts
        q_end = sp.op_end[e]
        sp.settle(q_end, [(s, 0) for s in starts])
    for e in range(tr.events):
        if e not in sp.op_end:  # an op without a kernel: kept as measured
            sp.op_end[e] = sp.add(int(tr.t_end[e]))
            sp.fixed_ops += 1
    sp.sort()
    return sp


def _members(prog: Program) -> list[np.ndarray]:
    offsets = prog.offsets
    return [prog.members[offsets[i] : offsets[i + 1]] for i in range(prog.instances)]


@dataclass
class _RankKernels:
    """One rank's kernels and CPU syncs as columns (on the run's clock), with the
    program terms made for them so far."""

    kind: list[str]
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    launch_known: np.ndarray
    launch: np.ndarray
    tid: np.ndarray
    seq: np.ndarray
    sync_q: dict[int, int] = field(default_factory=dict)
    syncs_by_tid: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    q_start: dict[int, int] = field(default_factory=dict)
    q_end: dict[int, int] = field(default_factory=dict)

    @classmethod
    def read(cls, table: object, shift: int) -> _RankKernels:
        import pyarrow as pa

        assert isinstance(table, pa.Table)
        known = table.column("t_launch_ns").is_null().to_numpy(zero_copy_only=False)
        return cls(
            kind=table.column("kind").to_pylist(),
            stream=as_numpy(table, "stream"),
            start=as_numpy(table, "t_start_ns") + shift,
            end=as_numpy(table, "t_end_ns") + shift,
            launch_known=~np.asarray(known),
            launch=as_numpy(table, "t_launch_ns", 0) + shift,
            tid=as_numpy(table, "tid"),
            seq=as_numpy(table, "seq"),
        )

    def cpu_term(self, t_cpu: int, thread: int, returns: dict[int, list[int]]) -> tuple[int, int]:
        """A CPU time as a term: after the thread's last sync that returned by then."""
        rows = self.syncs_by_tid.get(thread)
        if rows:
            k = bisect.bisect_right(returns[thread], t_cpu) - 1
            if k >= 0:
                i = rows[k]
                return self.sync_q[i], t_cpu - int(self.end[i])
        return NO_SOURCE, t_cpu


def _build_rank(
    sp: StreamProgram,
    rank: int,
    table: object,
    shift: int,
    seqs: np.ndarray,
    first_event: int,
    comm_start: dict[int, int],
) -> None:
    rk = _RankKernels.read(table, shift)
    # CPU syncs per thread, in call order: their return times govern later launches
    sync_rows = sorted((i for i, k in enumerate(rk.kind) if k == SYNC), key=lambda i: rk.start[i])
    for i in sync_rows:
        rk.sync_q[i] = sp.add(int(rk.end[i]))
        rk.syncs_by_tid[int(rk.tid[i])].append(i)
    event_of = {int(s): first_event + i for i, s in enumerate(seqs.tolist())}
    kernels = _add_kernels(sp, rank, rk, event_of, comm_start)
    for i in sync_rows:
        sp.syncs.append((rank, int(rk.start[i]), rk.sync_q[i]))
    ended = sorted(kernels, key=lambda i: rk.end[i])
    _settle_streams(sp, rk, kernels, ended)
    _settle_syncs(sp, rk, ended)


def _add_kernels(
    sp: StreamProgram,
    rank: int,
    rk: _RankKernels,
    event_of: dict[int, int],
    comm_start: dict[int, int],
) -> list[int]:
    """A start and an end time for each kernel; a communication kernel's are its op's."""
    kernels = [i for i, k in enumerate(rk.kind) if k in (COMPUTE, COMM)]
    for i in kernels:
        rk.q_start[i] = sp.add(int(rk.start[i]))
        rk.q_end[i] = sp.add(int(rk.end[i]))
        if rk.kind[i] == COMM and int(rk.seq[i]) in event_of:
            e = event_of[int(rk.seq[i])]
            sp.op_end[e] = rk.q_end[i]
            sp.op_start[e] = rk.q_start[i]
            comm_start[e] = rk.q_start[i]
        else:
            sp.settle(rk.q_end[i], [(rk.q_start[i], int(rk.end[i] - rk.start[i]))], 0)
        cpu = int(rk.launch[i]) if rk.launch_known[i] else int(rk.start[i])
        sp.kernels.append((rank, rk.q_start[i], rk.q_end[i], int(rk.kind[i] == COMM), cpu))
    return kernels


def _settle_streams(
    sp: StreamProgram, rk: _RankKernels, kernels: list[int], ended: list[int]
) -> None:
    """Each kernel's start: after its stream's previous kernel, its launch, the issuing
    stream's last launched kernel (for a collective), and a kernel of another stream
    that ended just before it (a wait read from the timing)."""
    returns = {t: [int(rk.end[i]) for i in rows] for t, rows in rk.syncs_by_tid.items()}
    launched = sorted(
        (i for i in kernels if rk.kind[i] == COMPUTE and rk.launch_known[i]),
        key=lambda i: rk.launch[i],
    )
    launch_times = [int(rk.launch[i]) for i in launched]
    by_stream: dict[int, list[int]] = defaultdict(list)
    for i in sorted(kernels, key=lambda i: (rk.start[i], rk.end[i])):
        by_stream[int(rk.stream[i])].append(i)
    end_times = [int(rk.end[i]) for i in ended]
    for s, rows in by_stream.items():
        for k, i in enumerate(rows):
            terms: list[tuple[int, int]] = []
            if k > 0:
                terms.append((rk.q_end[rows[k - 1]], 0))
            if rk.launch_known[i]:
                terms.append(rk.cpu_term(int(rk.launch[i]), int(rk.tid[i]), returns))
            if rk.kind[i] == COMM and rk.launch_known[i]:
                j = bisect.bisect_left(launch_times, int(rk.launch[i])) - 1
                while j >= 0 and int(rk.tid[launched[j]]) != int(rk.tid[i]):
                    j -= 1
                if j >= 0 and int(rk.stream[launched[j]]) != s:
                    terms.append((rk.q_end[launched[j]], 0))
                    sp.issue_edges += 1
            base = max((_value(sp, a, b) for a, b in terms), default=None)
            t0 = int(rk.start[i])
            # another stream's kernel that ended last before this start, within the window,
            # later than every cause above: this kernel waited for it
            hi = bisect.bisect_right(end_times, t0) - 1
            if hi >= 0:
                m = ended[hi]
                later = base is None or int(rk.end[m]) > base
                if (
                    m != i
                    and int(rk.stream[m]) != s
                    and later
                    and t0 - int(rk.end[m]) <= DEPENDENCY_WINDOW_NS
                ):
                    terms.append((rk.q_end[m], 0))
                    sp.edges += 1
                    base = int(rk.end[m]) if base is None else max(base, int(rk.end[m]))
            if base is not None and t0 - base > DEPENDENCY_WINDOW_NS:
                sp.unexplained += 1
            sp.settle(rk.q_start[i], terms)


def _settle_syncs(sp: StreamProgram, rk: _RankKernels, ended: list[int]) -> None:
    """Each sync returns after the thread's previous sync and the kernel that ended last
    in it."""
    end_times = [int(rk.end[i]) for i in ended]
    for rows in rk.syncs_by_tid.values():
        for k, i in enumerate(rows):
            call, ret = int(rk.start[i]), int(rk.end[i])
            terms = []
            if k > 0:
                prev = rows[k - 1]
                terms.append((rk.sync_q[prev], call - int(rk.end[prev])))
            else:
                terms.append((NO_SOURCE, call))
            j = bisect.bisect_right(end_times, ret) - 1
            if j >= 0 and int(rk.end[ended[j]]) >= call:
                terms.append((rk.q_end[ended[j]], 0))
            sp.settle(rk.sync_q[i], terms)


def _value(sp: StreamProgram, src: int, add: int) -> int:
    return add if src == NO_SOURCE else sp.measured[src] + add


# -- figures -----------------------------------------------------------------


def _union(lo: np.ndarray, hi: np.ndarray) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(zip(lo.tolist(), hi.tolist(), strict=True)):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _covered(spans: list[tuple[int, int]], lo: int, hi: int) -> int:
    """ns of [lo, hi] inside the disjoint sorted ``spans``."""
    total = 0
    k = bisect.bisect_right(spans, (lo, lo)) - 1
    for a, b in spans[max(k, 0) :]:
        if a >= hi:
            break
        total += max(0, min(b, hi) - max(a, lo))
    return total


def figures(sp: StreamProgram, prog: Program, value: list[int], keep: list[int]) -> Figures:
    """What the replayed times ``value`` say about the steps ``keep`` (as
    :class:`~commlens.whatif.results.Figures`): a rank's step runs from its step mark
    (moved as its CPU was) to the later of its end mark and the end of the last kernel
    launched in it; communication is the union of its comm kernels, exposed where no
    compute kernel runs beside them on the device."""
    tr = prog.trace
    steps = sorted(keep)
    n_ranks = tr.world_size
    kern = np.array(sp.kernels, dtype=np.int64).reshape(-1, 5)
    val = np.array(value, dtype=np.int64)
    meas = np.array(sp.measured, dtype=np.int64)
    sync = np.array(sp.syncs, dtype=np.int64).reshape(-1, 3)
    step_s = {s: 0.0 for s in steps}
    comm = np.zeros((len(steps), n_ranks))
    exposed = np.zeros((len(steps), n_ranks))
    held = np.zeros(n_ranks)
    op_keys: dict[tuple[str, str], list[float]] = {}
    seen_ranks: set[int] = set()
    ends: dict[int, tuple[int, int, int]] = {}  # step -> its slowest rank's start, end, end's q
    for w in range(tr.step_rank.size):
        r, s = int(tr.step_rank[w]), int(tr.step_index[w])
        if s not in step_s:
            continue
        seen_ranks.add(r)
        a, b = int(tr.step_start[w]), int(tr.step_end[w])
        mine = sync[sync[:, 0] == r]

        def moved(t: int, mine: np.ndarray = mine) -> int:
            before = mine[meas[mine[:, 2]] <= t] if mine.size else mine
            if not before.size:
                return t
            q = int(before[np.argmax(meas[before[:, 2]]), 2])
            return t + int(val[q] - meas[q])

        ks = kern[(kern[:, 0] == r) & (kern[:, 4] >= a) & (kern[:, 4] <= b)]
        start = moved(a)
        stop = max(moved(b), int(val[ks[:, 2]].max()) if ks.size else b)
        if (stop - start) / 1e9 >= step_s[s]:
            step_s[s] = (stop - start) / 1e9
            last_q = int(ks[np.argmax(val[ks[:, 2]]), 2]) if ks.size else -1
            ends[s] = (start, stop, last_q if ks.size and val[last_q] == stop else -1)
        rank_k = kern[kern[:, 0] == r]
        compute = _union(val[rank_k[rank_k[:, 3] == 0, 1]], val[rank_k[rank_k[:, 3] == 0, 2]])
        cks = ks[ks[:, 3] == 1]
        spans = _union(np.clip(val[cks[:, 1]], start, stop), np.clip(val[cks[:, 2]], start, stop))
        k = steps.index(s)
        comm[k, r] = sum(b2 - a2 for a2, b2 in spans) / 1e9
        exposed[k, r] = sum(b2 - a2 - _covered(compute, a2, b2) for a2, b2 in spans) / 1e9
        for e in np.flatnonzero((tr.rank == r) & (tr.step == s)).tolist():
            if e not in sp.transfer:
                continue
            q0, q1 = sp.op_start[e], sp.op_end[e]
            last = max(val[m] for m in sp.transfer[e])
            t0, t1 = int(val[q0]), int(val[q1])
            key = (tr.op_names[tr.op[e]], tr.role_names[tr.role[e]] if tr.role_names else "")
            row = op_keys.setdefault(key, [0.0] * 6)
            row[0] += 1
            row[1] += float(tr.size_bytes[e])
            row[2] += (t1 - t0) / 1e9
            row[3] += (t1 - last) / 1e9
            row[4] += (last - t0) / 1e9
            row[5] += (t1 - t0 - _covered(compute, t0, t1)) / 1e9
            held[r] += (last - t0) / 1e9
    ranks = sorted(seen_ranks)
    scale = 1.0 / max(len(steps) * len(ranks), 1)
    comm_s = float(np.median(comm[:, ranks].mean(axis=1))) if ranks else 0.0
    exposed_s = float(np.median(exposed[:, ranks].mean(axis=1))) if ranks else 0.0
    slowest = min(ranks, key=lambda r: held[r]) if ranks else 0
    ops = [
        OpRow(
            op,
            role,
            v[0] * scale,
            v[1] * scale,
            v[2] * scale,
            v[3] * scale,
            v[4] * scale,
            v[5] * scale,
        )
        for (op, role), v in sorted(op_keys.items(), key=lambda kv: -kv[1][2])
    ]
    return Figures(
        steps=steps,
        step_s=[step_s[s] for s in steps],
        comm_s=comm_s,
        exposed_s=exposed_s,
        overlapped_s=max(comm_s - exposed_s, 0.0),
        ops=ops,
        slowest_rank=slowest,
        slowest_held_s=float(held[slowest]) * len(ranks) * scale if ranks else 0.0,
        median_held_s=float(np.median(held[ranks])) * len(ranks) * scale if ranks else 0.0,
        critical=critical_path(sp, prog, value, ends[steps[-1]]) if steps and ends else [],
    )


def critical_path(
    sp: StreamProgram, prog: Program, value: list[int], span: tuple[int, int, int]
) -> list[PathShare]:
    """What the step's end waited for, walking back from it over each time's latest
    cause to the step's start: an op's transfer counts for the op, the rest (kernels,
    launches, gaps) as compute. ``span``: the step's start, end and the time that ends
    it (-1: the CPU's own step end, all compute)."""
    begin, stop, q = span
    total = stop - begin
    if total <= 0:
        return []
    tr = prog.trace
    label = {
        sp.op_end[e]: (tr.op_names[tr.op[e]], tr.role_names[tr.role[e]] if tr.role_names else "")
        for e in sp.transfer
    }
    spent: dict[tuple[str, str], int] = defaultdict(int)
    covered = 0
    if q >= 0:
        covered = stop - value[q]  # after the last kernel: the CPU's
        while q >= 0 and value[q] > begin:
            src = NO_SOURCE
            best: int | None = None
            for s, add in sp.terms[q]:
                t = add if s == NO_SOURCE else value[s] + add
                if best is None or t > best:
                    best, src = t, s
            low = begin if best is None else max(best, begin)
            if q in label:  # the transfer (from its last member's start)
                spent[label[q]] += value[q] - low
            else:
                spent[("compute", "")] += value[q] - low
            covered += value[q] - low
            q = src
    spent[("compute", "")] += total - covered
    rows = [
        PathShare(op, role, t / 1e9, t / total)
        for (op, role), t in sorted(spent.items(), key=lambda kv: (kv[0][0] != "compute", -kv[1]))
        if t > 0 or op == "compute"
    ]
    return rows


def op_gaps(sp: StreamProgram, seconds: np.ndarray) -> dict[int, int]:
    """Each op end's gap when the op takes ``seconds[event]`` from its transfer's start."""
    return {sp.op_end[e]: round(float(seconds[e]) * 1e9) for e in sp.transfer}


ASSUMPTIONS = (
    "GPU streams (a run imported from profiler traces with its kernels): every kernel runs "
    "on its stream in the captured order, no earlier than its CPU launch (plus the launch "
    "latency the capture shows); compute kernels keep their measured times on every network",
    "a collective's kernel starts on a rank when its stream is free and the work the issuing "
    "thread queued before it is done (ProcessGroupNCCL's stream wait, taken to be on the "
    "stream of the last kernel that thread launched before the op); its transfer starts when "
    "the last member's kernel has started and lasts the op's time (measured: from that start "
    "to the member's end; on a network: the cost model's time for the op's size)",
    "the CPU is not blocked by NCCL: it launches as measured, except after a blocking sync "
    "(cudaStreamSynchronize, cudaDeviceSynchronize), which waits for the kernel that ended "
    "last inside it and moves the thread's later launches by as much as that kernel moved",
    "the trace holds no dependency edges between streams (its cudaStreamWaitEvent calls name "
    "neither stream nor event): a kernel that started within "
    f"{DEPENDENCY_WINDOW_NS // 1000} us after another stream's kernel ended, later than its "
    "own stream and launch allow, is taken to wait for it; exposure is comm-kernel time "
    "with no compute kernel running on the device (where a compute stream waits)",
)


def assumptions(sp: StreamProgram) -> list[str]:
    """:data:`ASSUMPTIONS`, with what the run showed of each."""
    found = (
        f"found in this run: {sp.issue_edges} issue waits, {sp.edges} waits between streams "
        f"read from the timing, {sp.unexplained} kernels that started more than "
        f"{DEPENDENCY_WINDOW_NS // 1000} us after every known cause (that gap kept as "
        f"measured), {len(sp.syncs)} CPU syncs"
    )
    out = [*ASSUMPTIONS, found]
    if sp.fixed_ops:
        out.append(f"{sp.fixed_ops} ops without a kernel keep their measured times")
    return out


def network_times(prog: Program, fabric: Fabric, groups: list[tuple[int, ...]]) -> np.ndarray:
    """Seconds each event's op lasts on ``fabric`` (the cost model's, NCCL's algorithms)."""
    return modelled(prog, fabric, groups, NCCL_REPLAY)


def profile_fabric(
    profile: NetworkProfile, intra: NetworkProfile, ranks_per_node: int, algorithm: str
) -> Fabric:
    return Fabric(inter=profile, intra=intra, gpus_per_node=ranks_per_node, algorithm=algorithm)


def stream_study(
    path: str | Path,
    prog: Program,
    profiles: list[NetworkProfile],
    place: Placement,
    keep: list[int],
    dp: int | None = None,
) -> Study:
    """The ``whatif`` answer for a run :func:`applies` holds: the stream replay with the
    measured op times (its self-check), then on each network of ``profiles``."""
    from commlens.predict.profiles import get_profile
    from commlens.whatif.study import Answer, SelfCheck, Study

    if dp is not None:
        raise UsageError("--dp is not available for a GPU-stream replay (an imported NCCL run)")
    sp = build(path, prog)
    measured = list(sp.measured)
    captured = figures(sp, prog, measured, keep)
    own = sp.evaluate()
    off = [abs(a - b) for a, b in zip(own, measured, strict=True)]
    replayed = figures(sp, prog, own, keep)
    errors = [
        abs(a - b) / b for a, b in zip(replayed.step_s, captured.step_s, strict=True) if b > 0
    ]
    check = SelfCheck(max(errors, default=0.0), max(off, default=0) / 1e9)
    intra = get_profile(place.intra)
    answers = []
    for profile in profiles:
        fabric = profile_fabric(profile, intra, place.ranks_per_node, place.algorithm)
        seconds = network_times(prog, fabric, prog.cost_groups)
        value = sp.evaluate(op_gaps(sp, seconds))
        answers.append(Answer(profile.name, profile, figures(sp, prog, value, keep)))
    shifts = {r: int(v) for r, v in enumerate(prog.clock_shifts.tolist()) if v}
    return Study(
        prog.trace,
        place,
        check,
        Answer("captured", None, captured),
        answers,
        assumptions(sp),
        clock_shifts=shifts,
        op_times="model",
    )
