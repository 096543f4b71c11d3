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

import multiprocessing
import os
import re
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.importers import et as et_reader
from commlens.importers.clocks import align_ranks
from commlens.importers.groups import parse_ranks, role_of
from commlens.importers.kinetojoin import Built, base_ns, build_rank
from commlens.importers.kinetoscan import FileScan, scan
from commlens.importers.model import Group, ImportedRun, Provenance
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
    built: dict[int, Built] = {}
    for rank, s in sorted(by_rank.items()):
        ets_here = et_by_pid.get(next(iter(sorted(s.pids)), -1)) if s.pids else None
        ets_here = ets_here or et_by_rank.get(rank)
        built[rank] = build_rank(rank, s, run, ets_here, options.sources)
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
            spans.append((min(times) * 1000 + base_ns(s), rank))
    if spans:
        (lo, r_lo), (hi, r_hi) = min(spans), max(spans)
        if hi - lo > _JOB_GAP_US * 1000:
            raise UsageError(
                f"the files are of different jobs: rank {r_lo} and rank {r_hi} were traced "
                f"{(hi - lo) / 3.6e12:.1f} hours apart"
            )


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


# -- provenance ----------------------------------------------------------------


def _provenance(
    run: ImportedRun,
    by_rank: dict[int, FileScan],
    built: dict[int, Built],
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
        if any(base_ns(s) for s in by_rank.values())
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
        **(
            {
                "t_cpu_issue_ns": "the CPU op's start (record_param_comms, or the c10d call "
                "around it): when the CPU issued the op; null for an op found only as a kernel",
                "stream": "the stream of the op's GPU kernel (the trace's args.stream)",
            }
            if device
            else {}
        ),
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
        prov.missing.append("steps: no ProfilerStep#N in the traces")
    missing = run.missing_ranks()
    if missing:
        from commlens.trace.files import format_ranks

        prov.missing.append(f"ranks {format_ranks(missing)} of {run.world_size}: no trace given")
        options.warn(
            f"ranks {format_ranks(missing)} of {run.world_size} have no trace; the run is "
            "written without them"
        )
