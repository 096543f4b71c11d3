"""PyTorch execution traces (ET, Chakra's input): one JSON per rank, sizes but no times.

An execution trace's ``record_param_comms`` nodes hold what older profiler
traces lack: the collective's name, its tensors (id, storage, offset, element
count, element size, device), and the split sizes of an all-to-all. Beside a
profiler trace (:mod:`.kineto`) they give its ops their sizes, joined by
record-function id, or, where the profiler trace has none (older traces), by
the order of ``record_param_comms`` on both sides, checked op by op. Imported
alone (``--format et``), the ops keep their order but have no times: they are
placed 1 µs apart, and the run says so.
"""

from __future__ import annotations

import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ijson

from commlens.errors import UsageError
from commlens.importers.commops import canonical_op, sizes
from commlens.importers.jsonstream import stream_error
from commlens.importers.model import Group, ImportedRun, Op, Provenance, RankTrace, dtype_of
from commlens.importers.registry import ImportOptions
from commlens.importers.sources import head_text, open_binary

NAME = "et"
_PID = re.compile(r'"pid"\s*:\s*(\d+)')
_SCHEMA = re.compile(r'"schema"\s*:\s*"([^"]*)"')


def detect(path: Path) -> bool:
    text = head_text(path, 4096)
    return '"nodes"' in text and '"schema"' in text and '"traceEvents"' not in text


@dataclass
class EtComm:
    """One ``record_param_comms`` node."""

    rf_id: int
    coll: str
    op: str | None
    numel: int = 0
    elem: int = 0
    dtype: str = ""
    in_splits: list[int] = field(default_factory=list)
    out_splits: list[int] = field(default_factory=list)
    rank: int | None = None
    seq: int | None = None


@dataclass
class EtTrace:
    path: Path
    pid: int | None
    schema: str
    records: list[EtComm]
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        ranks = {r.rank for r in self.records if r.rank is not None}
        if len(ranks) == 1:
            return ranks.pop()
        match = re.search(r"(\d+)(?!.*\d)", self.path.name)
        return int(match.group(1)) if match else None


def _tensors(value: Any) -> list[list[Any]]:
    """The tensor descriptors ([id, storage, offset, numel, elem size, device]) in an input."""
    if isinstance(value, list) and len(value) == 6 and all(isinstance(v, int) for v in value[:5]):
        return [value]
    if isinstance(value, list):
        return [t for v in value for t in _tensors(v)]
    return []


def _record(node: dict[str, Any]) -> EtComm:
    inputs = node.get("inputs") or []
    types = node.get("input_types") or []
    at = next((i for i, v in enumerate(inputs) if isinstance(v, str)), None)
    coll = str(inputs[at]) if at is not None else ""
    rec = EtComm(int(node.get("rf_id", -1)), coll, canonical_op(coll))
    if rec.op is None or at is None:
        return rec
    tensors = _tensors(inputs[0]) if inputs else []
    rec.numel = sum(int(t[3]) for t in tensors)
    rec.elem = int(tensors[0][4]) if tensors else 0
    dt = dtype_of(str(types[0]).replace("GenericList[", "").rstrip("]")) if types else None
    rec.dtype = dt[0] if dt else ""
    if at >= 1 and isinstance(inputs[at - 1], int):
        rec.rank = inputs[at - 1]
    if at >= 3 and isinstance(inputs[1], int):
        rec.seq = inputs[1]
    for name, pos in (("in_splits", at + 1), ("out_splits", at + 2)):
        value = inputs[pos] if len(inputs) > pos else []
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            setattr(rec, name, list(value))
    return rec


def read_trace(path: Path) -> EtTrace:
    head = head_text(path, 4096)
    pid = _PID.search(head)
    schema = _SCHEMA.search(head)
    records: list[EtComm] = []
    groups: dict[str, tuple[int, ...]] = {}
    try:
        with open_binary(path) as fh:
            for node in ijson.items(fh, "nodes.item", use_float=True):
                if not isinstance(node, dict):
                    continue
                name = node.get("name")
                if name == "record_param_comms":
                    records.append(_record(node))
                elif name == "## process_group:init ##":
                    groups.update(_pg_init(node))
    except (ijson.common.JSONError, OSError, EOFError, zlib.error) as exc:
        raise stream_error(path, exc) from None
    return EtTrace(
        path, int(pid.group(1)) if pid else None, schema.group(1) if schema else "", records, groups
    )


def _pg_init(node: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Groups from a ``## process_group:init ##`` node (schema 1.1): a JSON list of
    {pg_name, ranks, ...} in its first input."""
    import json

    out: dict[str, tuple[int, ...]] = {}
    for value in node.get("inputs") or []:
        if isinstance(value, str) and value.startswith("["):
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            for pg in parsed if isinstance(parsed, list) else []:
                if isinstance(pg, dict) and "pg_name" in pg and isinstance(pg.get("ranks"), list):
                    out[str(pg["pg_name"])] = tuple(int(r) for r in pg["ranks"])
    return out


def index(paths: list[Path]) -> tuple[dict[int, EtTrace], dict[int, EtTrace]]:
    """Execution traces by pid and by rank."""
    by_pid: dict[int, EtTrace] = {}
    by_rank: dict[int, EtTrace] = {}
    for path in paths:
        trace = read_trace(path)
        if trace.pid is not None:
            by_pid[trace.pid] = trace
        rank = trace.rank
        if rank is not None:
            if rank in by_rank:
                raise UsageError(
                    f"rank {rank} has two execution traces: {by_rank[rank].path} and {path}"
                )
            by_rank[rank] = trace
    return by_pid, by_rank


BY_RF_ID = "record-function id"
BY_ORDER = "order: the profiler trace carries no record-function ids that match"


def join(rpc: list[Any], trace: EtTrace) -> tuple[list[EtComm | None], str] | None:
    """The execution trace's record of each profiler ``record_param_comms`` (same order)
    and how they were joined (:data:`BY_RF_ID` or :data:`BY_ORDER`), or None when they
    cannot be joined."""
    by_rf = {r.rf_id: r for r in trace.records}
    ids = [o.args.get("Record function id") for o in rpc]
    if ids and all(isinstance(i, int) and i > 0 for i in ids) and all(i in by_rf for i in ids):
        return [by_rf[i] for i in ids], BY_RF_ID
    ordered = sorted(range(len(rpc)), key=lambda k: rpc[k].ts)
    if len(ordered) != len(trace.records):
        return None
    out: list[EtComm | None] = [None] * len(rpc)
    for k, rec in zip(ordered, trace.records, strict=True):
        named = rpc[k].args.get("Collective name")
        if named is not None and canonical_op(str(named)) != rec.op:
            return None
        out[k] = rec
    return out, BY_ORDER


def fill_sizes(op: Op, rec: EtComm) -> None:
    """Sizes of ``op`` from its execution-trace record."""
    if rec.op is None or not rec.elem:
        return
    n_out: int | None = None
    if rec.op == "all_to_all" and rec.in_splits and rec.out_splits and sum(rec.in_splits):
        row = rec.numel // sum(rec.in_splits)
        n_out = sum(rec.out_splits) * row
    s = sizes(rec.op, rec.numel, n_out, rec.elem, op.group_size)
    op.count, op.bytes_in, op.bytes_out, op.size_bytes = (
        s.count,
        s.bytes_in,
        s.bytes_out,
        s.size_bytes,
    )
    op.dtype = op.dtype or rec.dtype


def op_from_record(
    rec: EtComm, world: tuple[str, tuple[int, ...], str], counts: dict[str, int], joined: str = ""
) -> Op | None:
    """The op of an execution-trace record, sizes from it (``joined``: how the record
    was joined to the profiler trace, said in the count; empty: read alone)."""
    if rec.op is None:
        return None
    name, ranks, role = world
    op = Op(
        rec.op,
        0,
        0,
        pg_name=name,
        pg_ranks=ranks,
        group_size=len(ranks),
        role=role,
        dtype=rec.dtype,
        api="execution_trace",
    )
    fill_sizes(op, rec)
    how = f" (joined by {joined})" if joined else ""
    counts[f"sizes from the execution trace{how}"] += 1
    counts["group not in the trace: the world assumed"] += 1
    return op


def read(paths: list[Path], options: ImportOptions) -> ImportedRun:
    """Execution traces alone: ops in order, sizes exact, times none (placed 1 µs apart)."""
    _, by_rank = index(paths)
    if not by_rank:
        raise UsageError("no execution trace names its rank (in its comm nodes or its file name)")
    world = options.world_size or max(by_rank) + 1
    prov = Provenance(
        NAME,
        format_version=f"schema {next(iter(by_rank.values())).schema}",
        files=[options.sources[p] for p in paths if p in options.sources],
        time_fields={
            "clock": "none: an execution trace holds no op times",
            "t_issue_ns": "synthetic: the op's index in the rank's order x 1 µs (not measured)",
            "t_end_ns": "synthetic: t_issue_ns + 1 ns",
            "t_wait_ns": "0 (unknown)",
        },
        estimated=["every time is synthetic (op order only)"],
        missing=[
            "op times",
            "steps",
            "process group names (the world group assumed unless a process_group:init node lists "
            "them)",
        ],
        aggregate_only=True,
    )
    run = ImportedRun(prov, world)
    ranks = tuple(range(world))
    run.groups["0"] = Group("0", ranks, "default_pg")
    counts: dict[str, int] = defaultdict(int)
    for rank, trace in sorted(by_rank.items()):
        rt = RankTrace(rank, pid=trace.pid, files=[str(trace.path)])
        for i, rec in enumerate(r for r in trace.records if r.op is not None):
            op = op_from_record(rec, ("0", ranks, ""), counts)
            if op is None:
                continue
            op.t_issue_ns = (i + 1) * 1000
            op.t_end_ns = op.t_issue_ns + 1
            rt.ops.append(op)
        run.ranks[rank] = rt
    return run
