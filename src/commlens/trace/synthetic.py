"""Synthetic runs with known answers, written through the run format's own writer.

Two levels, one writer:

- :func:`ev` and :func:`write_run`: hand-placed events with exact times (µs
  given, ns stored); a rank's clock offset is applied in reverse to its stored
  times, so the reader's alignment must bring them back.
- :func:`write_parts`: a rank's events left as parts, as a rank that died
  mid-run leaves them.
- :func:`generate`: a run shaped like a real 3D-parallel capture of any size
  (tp × pp × dp ranks laid out as :class:`commlens.job.parallel.ParallelDims`
  lays them, groups created and named in the order the built-in workloads
  create them): per microbatch tensor-parallel all-reduces in forward and
  backward and pipeline send/recv pairs; per step async data-parallel bucket
  all-reduces over the last backward and a ZeRO all-gather. Each node's clock
  is offset, a few ranks straggle and every rank of one node arrives late;
  :class:`Planted` says which.

Every rank file goes through :class:`commlens.trace.writer.EventWriter`, every
rank's metadata and ``run.json`` through :mod:`commlens.trace.manifest`.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from commlens.job.parallel import ParallelDims
from commlens.trace.layout import rank_meta_path
from commlens.trace.manifest import FORMAT_NAME, write_json_atomic
from commlens.trace.packed import PACKED_EVENT
from commlens.trace.schema import EVENT_COLUMNS
from commlens.trace.writer import EventWriter, parts_dir

T0_NS = 1_700_000_000_000_000_000
US = 1000


def ev(
    rank: int,
    op: str,
    t_issue_us: float,
    t_end_us: float,
    *,
    pg: str = "0",
    pg_ranks: list[int] | None = None,
    size: int = 4096,
    dtype: str = "float32",
    wait_us: float | None = None,
    is_async: bool = False,
    step: int = 0,
    phase: str = "other",
    module: str = "",
    role: str = "",
    peer: int | None = None,
    api: str = "python",
    bytes_in: int | None = None,
    bytes_out: int | None = None,
) -> dict[str, Any]:
    """One event (times in µs from the run's start)."""
    ranks = pg_ranks if pg_ranks is not None else [0, 1]
    t_issue = T0_NS + round(t_issue_us * US)
    t_end = T0_NS + round(t_end_us * US)
    wait = t_end - t_issue if wait_us is None else round(wait_us * US)
    return {
        "rank": rank,
        "seq": -1,
        "op": op,
        "api": api,
        "pg_name": pg,
        "pg_ranks": ranks,
        "group_size": len(ranks),
        "role": role,
        "dtype": dtype,
        "count": (size if bytes_in is None else bytes_in) // 4,
        "bytes_in": size if bytes_in is None else bytes_in,
        "bytes_out": size if bytes_out is None else bytes_out,
        "size_bytes": size,
        "peer": peer,
        "is_async": is_async,
        "t_issue_ns": t_issue,
        "t_end_ns": t_end,
        "t_wait_ns": wait,
        "duration_s": (t_end - t_issue) / 1e9,
        "step": step,
        "phase": phase,
        "module": module,
    }


def write_rank(
    run_dir: Path,
    rank: int,
    events: list[dict[str, Any]],
    *,
    world_size: int,
    windows_ns: list[tuple[int, int]],
    offset_ns: int = 0,
    host: str = "synth",
    meta: dict[str, Any] | None = None,
) -> None:
    """Write one rank's events (true times; stored shifted by ``-offset_ns``) and metadata."""
    mine = sorted(events, key=lambda e: e["t_issue_ns"])
    writer = EventWriter(run_dir, rank, flush_events=1 << 20, flush_seconds=3600)
    for seq, e in enumerate(mine):
        row = {
            **e,
            "seq": seq,
            "t_issue_ns": e["t_issue_ns"] - offset_ns,
            "t_end_ns": e["t_end_ns"] - offset_ns,
        }
        writer.append(tuple(row[c] for c in EVENT_COLUMNS))
    writer.close()
    _write_rank_meta(run_dir, rank, len(mine), world_size, windows_ns, offset_ns, host, meta)


def _write_rank_meta(
    run_dir: Path,
    rank: int,
    events: int,
    world_size: int,
    windows_ns: list[tuple[int, int]],
    offset_ns: int,
    host: str,
    meta: dict[str, Any] | None,
) -> None:
    """A rank's ``rank-NNNNN.json``: its step windows and clock (stored times)."""
    write_json_atomic(
        rank_meta_path(run_dir, rank),
        {
            "format": FORMAT_NAME + "-rank",
            "rank": rank,
            "world_size": world_size,
            "backend": "gloo",
            "host": host,
            "status": "ok",
            "events": events,
            "steps": [
                {"step": i, "t_start_ns": a - offset_ns, "t_end_ns": b - offset_ns}
                for i, (a, b) in enumerate(windows_ns)
            ],
            "clock": {"offset_ns": offset_ns, "drift": 0.0, "t_ref_ns": T0_NS, "rtt_ns": 0},
            "meta": meta or {},
        },
    )


def write_manifest(run_dir: Path, world_size: int, extra: dict[str, Any] | None = None) -> None:
    """Write ``run.json`` (last: a run is complete once it is there)."""
    manifest = {
        "format": FORMAT_NAME,
        "format_version": 1,
        "commlens_version": "0.1.0",
        "torch_version": "2.13.0+cpu",
        "world_size": world_size,
        "backend": "gloo",
        "env": {},
        **(extra or {}),
    }
    write_json_atomic(run_dir / "run.json", manifest)


def write_run(
    run_dir: Path,
    events: list[dict[str, Any]],
    *,
    world_size: int,
    steps: dict[int, list[tuple[float, float]]] | None = None,
    clock_offset_ns: dict[int, int] | None = None,
    rank_meta: dict[int, dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a run of hand-placed events; ``steps[rank]`` lists (start_us, end_us) of steps."""
    run_dir.mkdir(parents=True, exist_ok=True)
    by_rank: dict[int, list[dict[str, Any]]] = {r: [] for r in range(world_size)}
    for e in events:
        by_rank.setdefault(e["rank"], []).append(e)
    for rank in range(world_size):
        windows = [
            (T0_NS + round(a * US), T0_NS + round(b * US)) for a, b in (steps or {}).get(rank, [])
        ]
        write_rank(
            run_dir,
            rank,
            by_rank[rank],
            world_size=world_size,
            windows_ns=windows,
            offset_ns=(clock_offset_ns or {}).get(rank, 0),
            meta=(rank_meta or {}).get(rank, {}),
        )
    write_manifest(run_dir, world_size, extra)
    return run_dir


# -- realistic runs ---------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """The shape of a generated run."""

    tp: int = 2
    pp: int = 2
    dp: int = 2
    ranks_per_node: int = 8
    steps: int = 3
    microbatches: int = 2
    layers: int = 2
    """Transformer layers per stage: two TP all-reduces per layer in forward, two in backward."""
    buckets: int = 4
    """Async DP gradient buckets per step."""
    stragglers: tuple[int, ...] | None = None
    """Ranks that arrive late at every collective; None: two picked from the layout."""
    straggler_us: float = 600.0
    slow_node: int | None = -1
    """Node whose every rank arrives late; -1: the second node (none with one node)."""
    slow_node_us: float = 250.0
    node_offset_us: float = 40.0
    """Node n's clock reads n × this many µs ahead (node 0 is the reference)."""
    jitter_us: float = 20.0
    seed: int = 0

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.ranks_per_node)

    def ops_per_step(self) -> int:
        """Collective and p2p events per rank per step on an inner pipeline stage
        (the first and last stages each have half its p2p ops)."""
        tp_ops = 4 * self.layers if self.tp > 1 else 0
        pp_ops = 4 if self.pp > 2 else 2 if self.pp == 2 else 0
        return self.microbatches * (tp_ops + pp_ops) + (self.buckets + 1 if self.dp > 1 else 0)

    def events_per_step(self) -> int:
        """Events of all ranks in one step (each pipeline boundary: a send and a recv per
        microbatch each way, per tp and dp index)."""
        tp_ops = 4 * self.layers if self.tp > 1 else 0
        dp_ops = self.buckets + 1 if self.dp > 1 else 0
        p2p = 4 * (self.pp - 1) * self.microbatches * self.tp * self.dp
        return self.world_size * (self.microbatches * tp_ops + dp_ops) + p2p

    def with_events(self, events: int) -> Spec:
        """This shape with as many steps as give about ``events`` events (at least 2)."""
        return replace(self, steps=max(2, round(events / self.events_per_step())))

    def with_layers_for(self, events: int) -> Spec:
        """This shape, its steps kept, with as many layers per stage as give about
        ``events`` events (at least 1; each layer adds four TP all-reduces per microbatch)."""
        if self.tp == 1:
            raise ValueError("without tensor parallelism layers add no events")
        fixed = replace(self, layers=0).events_per_step()
        per_layer = self.world_size * self.microbatches * 4
        layers = round((events / self.steps - fixed) / per_layer)
        return replace(self, layers=max(1, layers))


@dataclass
class Planted:
    """What a generated run holds by construction: the answers a reader must find."""

    world_size: int
    hosts: dict[int, str]
    """rank -> its node's host name."""
    stragglers: list[int]
    slow_node: str | None
    slow_ranks: list[int]
    clock_offset_ns: dict[str, int]
    """host -> its clock's offset (stored = true - offset)."""
    events: int = 0
    groups: dict[str, list[list[int]]] = field(default_factory=dict)
    """role -> its groups' ranks."""
    names: dict[str, list[str]] = field(default_factory=dict)
    """role -> its groups' names, in the order of ``groups``."""


_SLOT_US = 1500.0  # one op slot: room for the latest arrival plus the op
_BW = {"tp": 100e3, "pp": 25e3, "dp": 12e3}  # bytes per µs (GB/s × 1e3)
_LAT_US = {"tp": 8.0, "pp": 10.0, "dp": 25.0}


def _service_us(role: str, size: int, n: int, op: str) -> float:
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n if n > 1 else 1.0
    return _LAT_US[role] + size * factor / _BW[role]


def _schedule(spec: Spec) -> list[tuple[str, str, str, str, int, str]]:
    """One step's op slots: (kind, op, role, phase, size, module); kind picks the ranks."""
    slots: list[tuple[str, str, str, str, int, str]] = []
    act = 4 << 20
    for mb in range(spec.microbatches):
        if spec.pp > 1:
            slots.append(("recv_fwd", "recv", "pp", "forward", act, ""))
        for layer in range(spec.layers if spec.tp > 1 else 0):
            for part in ("attn", "mlp"):
                slots.append(("tp", "all_reduce", "tp", "forward", act, f"layers.{layer}.{part}"))
        if spec.pp > 1:
            slots.append(("send_fwd", "send", "pp", "forward", act, ""))
        del mb
    for mb in range(spec.microbatches):
        if spec.pp > 1:
            slots.append(("recv_bwd", "recv", "pp", "backward", act, ""))
        for layer in reversed(range(spec.layers if spec.tp > 1 else 0)):
            for part in ("mlp", "attn"):
                slots.append(("tp", "all_reduce", "tp", "backward", act, f"layers.{layer}.{part}"))
        if spec.pp > 1:
            slots.append(("send_bwd", "send", "pp", "backward", act, ""))
        del mb
    return slots


def _layout(spec: Spec) -> tuple[ParallelDims, dict[str, list[list[int]]], dict[str, list[str]]]:
    """The groups per role and their names, created in the order the workloads create them."""
    dims = ParallelDims(spec.world_size, dp=spec.dp, tp=spec.tp, pp=spec.pp)
    groups: dict[str, list[list[int]]] = {}
    names: dict[str, list[str]] = {}
    next_name = 1  # "0" is the default (world) group
    for role in ("tp", "dp", "pp"):
        if dims.degree(role) == 1:
            continue
        groups[role] = dims.groups(role)
        names[role] = [str(next_name + i) for i in range(len(groups[role]))]
        next_name += len(groups[role])
    return dims, groups, names


def _planted(spec: Spec) -> Planted:
    world = spec.world_size
    hosts = {r: f"node{r // spec.ranks_per_node:03d}" for r in range(world)}
    slow = spec.slow_node
    if slow == -1:
        slow = 1 if spec.nodes > 1 else None
    slow_host = None if slow is None else f"node{slow:03d}"
    slow_ranks = [r for r in range(world) if hosts[r] == slow_host]
    if spec.stragglers is None:
        picks = [world // 2 - 1 - world // 8, world - 1 - world // 16]
        stragglers = sorted({p for p in picks if 0 <= p < world and p not in slow_ranks})
    else:
        stragglers = sorted(spec.stragglers)
    offsets = {f"node{n:03d}": round(n * spec.node_offset_us * US) for n in range(spec.nodes)}
    return Planted(world, hosts, stragglers, slow_host, slow_ranks, offsets)


def _arrays_of_rank(
    r: int,
    spec: Spec,
    dims: ParallelDims,
    arrive: np.ndarray,
    member_idx: dict[str, np.ndarray],
    gi: dict[str, np.ndarray],
    slots: list[tuple[str, str, str, str, int, str]],
) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
    """Rank ``r``'s events of every step, as columns in µs (true times), and the kind
    (:data:`commlens.trace.packed.KIND_FIELDS` less the group) of each of its slots.
    ``arrive``: (steps, slot rows, world) arrival offsets in µs; only the columns of
    ``r``, its groups' members and its pipeline peers are read (a rank's work does not
    grow with the world size)."""
    steps = spec.steps
    n_fixed = len(slots)
    step_us = (n_fixed + spec.buckets + 4) * _SLOT_US
    t0 = np.arange(steps) * step_us
    kinds: list[tuple[Any, ...]] = []
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("issue", "end", "wait", "peer", "kind")}
    sizes: list[tuple[int, int, int]] = []  # (size, bytes_in, is_async) per kind
    bucket = 25 << 20
    shard = bucket * spec.buckets // max(spec.dp, 1)
    coords = dims.coords(r)

    def emit(
        kind: tuple[Any, ...],
        size: tuple[int, int, int],
        issue: Any,
        end: Any,
        wait: Any,
        peer: int = -1,
    ) -> None:
        kinds.append(kind)
        sizes.append(size)
        n = steps
        cols["issue"].append(np.broadcast_to(issue, n))
        cols["end"].append(np.broadcast_to(end, n))
        cols["wait"].append(np.broadcast_to(wait, n))
        cols["peer"].append(np.full(n, peer))
        cols["kind"].append(np.full(n, len(kinds) - 1))

    members = {role: member_idx[role][int(gi[role][r])] for role in member_idx}

    def at(base: np.ndarray, row: int, who: Any) -> np.ndarray:
        """Arrival times (steps x ``who``) at slot row ``row``, the slot starting at ``base``."""
        times = arrive[:, row, who]
        return base + times if times.ndim == 1 else base[:, None] + times

    def last_of(role: str, base: np.ndarray, row: int) -> np.ndarray:
        """Per step, the latest arrival in rank r's ``role`` group at slot row ``row``."""
        return at(base, row, members[role]).max(axis=1)

    for s, (kind, op, _role, phase, size, module) in enumerate(slots):
        base = t0 + s * _SLOT_US
        mine = at(base, s, r)
        if kind == "tp":
            end = last_of("tp", base, s) + _service_us("tp", size, spec.tp, op)
            emit((op, "python", "tp", phase, module), (size, size, 0), mine, end, end - mine)
            continue
        forward = kind.endswith("fwd")
        peer_stage = coords["pp"] + (1 if forward == kind.startswith("send") else -1)
        if not 0 <= peer_stage < spec.pp:
            continue
        peer = dims.rank_of(coords["dp"], coords["tp"], peer_stage)
        service = _service_us("pp", size, 2, op)
        theirs = at(base, s, peer)
        if kind.startswith("send"):
            issue = mine + _SLOT_US / 2
            end = np.maximum(issue, theirs) + service
        else:
            issue = mine
            end = np.maximum(issue, theirs + _SLOT_US / 2) + service
        emit((op, "python", "pp", phase, ""), (size, size, 0), issue, end, end - issue, peer)
    if spec.dp > 1:
        # async DDP buckets fire during the last backward, waited for before the optimizer
        fired = t0 + (n_fixed - spec.buckets) * _SLOT_US
        ready = t0 + (n_fixed + spec.buckets + 1) * _SLOT_US
        service = _service_us("dp", bucket, spec.dp, "all_reduce")
        for b in range(spec.buckets):
            base = fired + b * _SLOT_US
            end = last_of("dp", base, n_fixed + b) + service
            emit(
                ("all_reduce", "ddp_hook", "dp", "backward", ""),
                (bucket, bucket, 1),
                at(base, n_fixed + b, r),
                end,
                np.maximum(0.0, end - ready),
            )
        base = ready + _SLOT_US
        row = arrive.shape[1] - 1
        gathered = shard * spec.dp
        end = last_of("dp", base, row) + _service_us("dp", gathered, spec.dp, "all_gather")
        mine = at(base, row, r)
        optimizer = ("all_gather", "python", "dp", "optimizer", "")
        emit(optimizer, (gathered, shard, 0), mine, end, end - mine)
    return kinds, _step_major(cols, sizes, steps)


def _step_major(
    cols: dict[str, list[np.ndarray]], sizes: list[tuple[int, int, int]], steps: int
) -> dict[str, np.ndarray]:
    """A rank's columns (one array per slot, a value per step) as one column each in
    step order, with each event's step and its slot's size, bytes in and asyncness."""
    out = {k: np.stack(v, axis=1).reshape(-1) for k, v in cols.items()}
    out["step"] = np.repeat(np.arange(steps), len(sizes))
    size_of = np.array(sizes, np.int64).reshape(-1, 3)
    out["size"], out["bytes_in"], out["is_async"] = (size_of[out["kind"], i] for i in range(3))
    return out


def write_rank_arrays(
    run_dir: Path,
    rank: int,
    kinds: list[tuple[Any, ...]],
    cols: dict[str, np.ndarray],
    *,
    world_size: int,
    windows_ns: list[tuple[int, int]],
    offset_ns: int = 0,
    host: str = "synth",
    meta: dict[str, Any] | None = None,
) -> int:
    """Write one rank's events given as columns (times in µs from the run's start, true
    times; stored shifted by ``-offset_ns``), in issue order; ``kinds[cols["kind"]]``
    is each event's :data:`~commlens.trace.packed.KIND_FIELDS`. Returns the count."""
    order = np.argsort(cols["issue"], kind="stable")
    issue = T0_NS + np.round(cols["issue"][order] * US).astype(np.int64)
    end = T0_NS + np.round(cols["end"][order] * US).astype(np.int64)
    wait = np.round(cols["wait"][order] * US).astype(np.int64)
    n = order.size
    size = cols["size"][order]
    bytes_in = cols["bytes_in"][order]
    writer = EventWriter(run_dir, rank, flush_events=1 << 20, flush_seconds=3600)
    ids = np.array([writer.kind(k) for k in kinds], np.int64)
    rows = np.column_stack(
        [
            ids[cols["kind"][order]],
            np.arange(n),
            bytes_in // 2,  # bfloat16 elements
            bytes_in,
            size,
            size,
            cols["peer"][order],
            cols["is_async"][order],
            issue - offset_ns,
            end - offset_ns,
            wait,
            cols["step"][order],
        ]
    ).astype("<i8")
    assert rows.shape[1] * 8 == PACKED_EVENT.size
    packed = rows.tobytes()
    width = PACKED_EVENT.size
    for i in range(0, len(packed), width):
        writer.append_packed(packed[i : i + width])
    writer.close()
    _write_rank_meta(run_dir, rank, n, world_size, windows_ns, offset_ns, host, meta)
    return n


def generate(run_dir: Path, spec: Spec, *, per_node: bool = False) -> Planted:
    """Write a run of ``spec``'s shape into ``run_dir`` (created); return what it plants.

    ``per_node``: as a job whose nodes share no file system leaves it, one run
    directory per node (``run_dir/<host>``, each with its own ``run.json``), for
    ``commlens merge``. Each rank's events are computed as columns over all its steps
    at once (memory: the arrival times of the run, and one rank's events).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    world = spec.world_size
    dims, groups, names = _layout(spec)
    planted = _planted(spec)
    planted.groups, planted.names = groups, names
    late = np.zeros(world)
    late[planted.slow_ranks] += spec.slow_node_us
    late[planted.stragglers] += spec.straggler_us
    gi = {  # rank -> index of its group, per role
        role: np.array([next(i for i, g in enumerate(gs) if r in g) for r in range(world)])
        for role, gs in groups.items()
    }
    member_idx = {role: np.array(gs) for role, gs in groups.items()}
    slots = _schedule(spec)
    n_fixed = len(slots)
    step_us = (n_fixed + spec.buckets + 4) * _SLOT_US
    rng = np.random.default_rng(spec.seed)
    rows = n_fixed + spec.buckets + 1
    arrive = late + rng.uniform(0, spec.jitter_us, (spec.steps, rows, world))
    windows = [
        (T0_NS + round(t0 * US), T0_NS + round((t0 + step_us - _SLOT_US) * US))
        for t0 in (step * step_us for step in range(spec.steps))
    ]
    for r in range(world):
        kinds, cols = _arrays_of_rank(r, spec, dims, arrive, member_idx, gi, slots)
        group_of = {role: int(gi[role][r]) for role in groups}
        full = [
            (
                op,
                api,
                names[role][group_of[role]],
                tuple(groups[role][group_of[role]]),
                len(groups[role][group_of[role]]),
                role,
                "bfloat16",
                phase,
                module,
            )
            for op, api, role, phase, module in kinds
        ]
        host = planted.hosts[r]
        where = run_dir / host if per_node else run_dir
        where.mkdir(exist_ok=True)
        planted.events += write_rank_arrays(
            where,
            r,
            full,
            cols,
            world_size=world,
            windows_ns=windows,
            offset_ns=planted.clock_offset_ns[host],
            host=host,
            meta={"group_roles": {names[role][group_of[role]]: role for role in groups}},
        )
    # no workload: nothing here is a model's prediction; validate holds it as a trace
    layout = {"generator": __name__, "tp": spec.tp, "pp": spec.pp, "dp": spec.dp}
    for where in sorted({run_dir / h for h in planted.hosts.values()}) if per_node else [run_dir]:
        write_manifest(where, world, {"synthetic": layout})
    return planted


def write_parts(part_dir: Path, table: pa.Table, *, per_part: int = 7) -> None:
    """Leave ``table`` (events in the schema's columns) as a rank that died mid-run
    leaves them in ``part_dir`` (``.rank-NNNNN.parts``): the writer's parts, ``per_part``
    events each, written by the real writer into a scratch directory and copied
    before it could join them into a rank file."""
    rank = int(part_dir.name.removeprefix(".rank-").removesuffix(".parts"))
    with tempfile.TemporaryDirectory() as scratch:
        writer = EventWriter(Path(scratch), rank, flush_events=per_part, flush_seconds=3600)
        for row in table.to_pylist():
            writer.append(tuple(row[c] for c in EVENT_COLUMNS))
        writer.flush()
        shutil.copytree(parts_dir(Path(scratch), rank), part_dir)
        writer.close()
