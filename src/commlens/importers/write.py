"""Write an :class:`ImportedRun` as an ordinary run directory, whole or not at all.

Every rank's ops go through the run format's own writer
(:class:`commlens.trace.writer.EventWriter`), its step windows and clock
offset into its ``rank-NNNNN.json``, and the provenance into ``run.json``
under ``import``. All of it is written into a temporary directory beside
``out`` and renamed onto it at the end: an error or an interrupt leaves
nothing at ``out``.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.errors import UsageError
from commlens.importers.model import ImportedRun, Op, RankTrace
from commlens.trace.kernels import write_kernels
from commlens.trace.layout import rank_meta_path
from commlens.trace.manifest import (
    DEVICE_TIMES,
    FORMAT_NAME,
    HOST_TIMES,
    MANIFEST,
    SYNTHETIC_TIMES,
    TIME_SEMANTICS,
    base_manifest,
    merge_manifest,
    write_json_atomic,
)
from commlens.trace.rundir import build_beside, first_foreign, foreign_in_run, is_run_dir
from commlens.trace.schema import DEVICE_COLUMN_NAMES, EVENT_COLUMNS, MAX_BYTES, MAX_TIME_NS, OPS
from commlens.trace.writer import EventWriter

IMPORT_KEY = "import"
"""The manifest's key for the provenance of an imported run."""


def check_out(out: Path, force: bool) -> None:
    """A one-line error unless ``out`` can take the run (new, empty, or an old run with force)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"--out {out} exists and is not a directory; pick a new directory")
    if out.is_dir() and first_foreign(out, lambda e: e) is not None:
        if not is_run_dir(out):
            raise UsageError(
                f"--out {out} already exists and is not a commlens run; pick a new directory"
            )
        if not force:
            raise UsageError(f"--out {out} already holds a run; pass --force to replace it")
        bad = first_foreign(out, foreign_in_run)
        if bad is not None:
            raise UsageError(
                f"--out {out} holds {bad.name}, which commlens did not write; refusing to "
                "replace it"
            )


def write_run(
    run: ImportedRun, out: Path, *, force: bool = False, command: list[str] | None = None
) -> int:
    """Write ``run`` at ``out``; returns the number of events written."""
    check_out(out, force)
    if not run.ranks:
        raise UsageError("the sources hold no rank's data")
    total = sum(len(r.ops) for r in run.ranks.values())
    if total == 0:
        raise UsageError("the sources hold no communication (no collective or point-to-point op)")
    build_beside(out, lambda tmp: _build(run, tmp, command), "the run", "import")
    return total


def whole_run_step(run: ImportedRun) -> None:
    """A source that names no step: each rank's whole trace becomes step 0, said so
    (the analyses, ``validate`` and ``whatif`` work on steps; -1 is set-up)."""
    if any(t.steps for t in run.ranks.values()):
        return
    for trace in run.ranks.values():
        if not trace.ops:
            continue
        start = min(o.t_issue_ns for o in trace.ops)
        end = max(max(o.t_end_ns, o.t_issue_ns) for o in trace.ops)
        trace.steps = [(0, start, end)]
        for op in trace.ops:
            op.step = 0
    run.provenance.estimated.append(
        "steps: the source names none; each rank's whole trace is taken as step 0"
    )


def _build(run: ImportedRun, tmp: Path, command: list[str] | None) -> None:
    whole_run_step(run)
    roles = {g.name: g.role for g in run.groups.values() if g.role}
    for rank in sorted(run.ranks):
        _write_rank(run, run.ranks[rank], tmp, roles)
    prov = run.provenance
    provenance: dict[str, Any] = asdict(prov)
    provenance["ranks_present"] = sorted(run.ranks)
    provenance["ranks_missing"] = run.missing_ranks()
    provenance["groups"] = {
        name: {"ranks": list(g.ranks), "desc": g.desc, "role": g.role, "backend": g.backend}
        for name, g in sorted(run.groups.items())
    }
    provenance["warnings"] = list(run.warnings)
    manifest = base_manifest()
    manifest.update(
        {
            "env": {},
            "backend": run.backend or "unknown",
            "world_size": run.world_size,
            "command": command,
            TIME_SEMANTICS: SYNTHETIC_TIMES
            if prov.aggregate_only
            else DEVICE_TIMES
            if prov.device_time
            else HOST_TIMES,
            IMPORT_KEY: provenance,
        }
    )
    manifest.pop("torch_version", None)  # the importing machine's, not the job's
    if run.job.get("torch_version"):
        manifest["torch_version"] = str(run.job["torch_version"])
    if run.job:
        manifest["job"] = {k: v for k, v in run.job.items() if k != "torch_version"}
    write_json_atomic(tmp / MANIFEST, manifest)
    merge_manifest(tmp)


def _write_rank(run: ImportedRun, trace: RankTrace, tmp: Path, roles: dict[str, str]) -> None:
    order = sorted(
        range(len(trace.ops)), key=lambda i: (trace.ops[i].t_issue_ns, trace.ops[i].t_end_ns)
    )
    ops = [trace.ops[i] for i in order]
    if trace.kernels is not None:
        seq_of = np.full(len(order) + 1, -1, np.int64)  # op index -> seq; -1 (last): none
        seq_of[np.array(order, np.int64)] = np.arange(len(order))
        index = pc.fill_null(trace.kernels.column("seq"), -1).to_numpy()
        seqs = seq_of[np.where(index >= 0, index, len(order))]
        column = pa.array(seqs, pa.int64(), mask=seqs < 0)
        kernels = trace.kernels.set_column(
            trace.kernels.schema.get_field_index("seq"), "seq", column
        )
        write_kernels(tmp, trace.rank, kernels)
    device = run.provenance.device_time
    writer = EventWriter(tmp, trace.rank, flush_events=65536, flush_seconds=3600.0, device=device)
    try:
        for seq, op in enumerate(ops):
            writer.append(_row(trace.rank, seq, op, device))
    finally:
        writer.close()
    times = [t for o in ops for t in (o.t_issue_ns, o.t_end_ns)]
    times += [t for s in trace.steps for t in s[1:]]
    clock = trace.meta.pop("clock", None)
    data: dict[str, Any] = {
        "format": FORMAT_NAME + "-rank",
        "rank": trace.rank,
        "world_size": run.world_size,
        "backend": run.backend or "unknown",
        "host": trace.host,
        "pid": trace.pid,
        "status": "ok",
        "events": len(ops),
        "t_start_ns": min(times) if times else None,
        "t_end_ns": max(times) if times else None,
        "steps": [{"step": s, "t_start_ns": a, "t_end_ns": b} for s, a, b in sorted(trace.steps)],
        "clock": clock or {},
        "meta": {
            **trace.meta,
            "group_roles": {n: r for n, r in roles.items() if any(o.pg_name == n for o in ops)},
            "imported_from": trace.files,
        },
    }
    write_json_atomic(rank_meta_path(tmp, trace.rank), data, indent=None)


def _row(rank: int, seq: int, op: Op, device: bool = False) -> tuple[Any, ...]:
    """``op`` as a writer's row: EVENT_COLUMNS, then DEVICE_COLUMN_NAMES when ``device``."""
    if op.op not in OPS:
        raise UsageError(f"rank {rank}: op {op.op!r} is not a commlens op")
    t_issue = _bounded(op.t_issue_ns, 0, MAX_TIME_NS, "a time", rank)
    t_end = _bounded(max(op.t_end_ns, op.t_issue_ns), 0, MAX_TIME_NS, "a time", rank)
    values = {
        "rank": rank,
        "seq": seq,
        "op": op.op,
        "api": op.api,
        "pg_name": op.pg_name,
        "pg_ranks": list(op.pg_ranks),
        "group_size": op.group_size or len(op.pg_ranks),
        "role": op.role,
        "dtype": op.dtype,
        "count": _bounded(op.count, 0, MAX_BYTES, "an element count", rank),
        "bytes_in": _bounded(op.bytes_in, 0, MAX_BYTES, "a size", rank),
        "bytes_out": _bounded(op.bytes_out, 0, MAX_BYTES, "a size", rank),
        "size_bytes": _bounded(op.size_bytes, 0, MAX_BYTES, "a size", rank),
        "peer": op.peer,
        "is_async": op.is_async,
        "t_issue_ns": t_issue,
        "t_end_ns": t_end,
        "t_wait_ns": max(0, min(op.t_wait_ns, t_end - t_issue)),
        "duration_s": (t_end - t_issue) / 1e9,
        "step": op.step,
        "phase": op.phase,
        "module": op.module,
    }
    if not device:
        return tuple(values[name] for name in EVENT_COLUMNS)
    cpu = op.t_cpu_issue_ns
    if cpu is not None:
        cpu = _bounded(cpu, 0, MAX_TIME_NS, "a time", rank)
    values["t_cpu_issue_ns"] = cpu
    values["stream"] = op.stream
    return tuple(values[name] for name in (*EVENT_COLUMNS, *DEVICE_COLUMN_NAMES))


def _bounded(value: int, lo: int, hi: int, what: str, rank: int) -> int:
    if not lo <= value <= hi:
        raise UsageError(f"rank {rank}: {what} of {value} is out of bounds ({lo}..{hi})")
    return int(value)
