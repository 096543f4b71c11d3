"""Synthetic runs with exactly known times, written in the real run format.

``ev(...)`` makes one event (times in µs for readability, stored in ns);
``write_run`` writes per-rank Parquet files through the real EventWriter and
per-rank metadata plus ``run.json`` through the real manifest code. A rank's
``clock_offset_ns`` is applied in reverse to its stored times, so the reader's
alignment must bring them back to the values given here.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.trace.manifest import FORMAT_NAME, rank_meta_path, write_json_atomic
from commlens.trace.schema import EVENT_COLUMNS
from commlens.trace.writer import EventWriter, parts_dir

T0_NS = 1_700_000_000_000_000_000


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
    ranks = pg_ranks if pg_ranks is not None else [0, 1]
    t_issue = T0_NS + round(t_issue_us * 1000)
    t_end = T0_NS + round(t_end_us * 1000)
    wait = t_end - t_issue if wait_us is None else round(wait_us * 1000)
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
    """Write a run; ``steps[rank]`` lists (start_us, end_us) of steps 0, 1, ..."""
    run_dir.mkdir(parents=True, exist_ok=True)
    offsets = clock_offset_ns or {}
    steps = steps or {}
    for rank in range(world_size):
        mine = sorted((e for e in events if e["rank"] == rank), key=lambda e: e["t_issue_ns"])
        off = offsets.get(rank, 0)
        writer = EventWriter(run_dir, rank)
        for seq, e in enumerate(mine):
            row = {
                **e,
                "seq": seq,
                "t_issue_ns": e["t_issue_ns"] - off,
                "t_end_ns": e["t_end_ns"] - off,
            }
            writer.append(tuple(row[c] for c in EVENT_COLUMNS))
        writer.close()
        windows = [
            {
                "step": i,
                "t_start_ns": T0_NS + round(a * 1000) - off,
                "t_end_ns": T0_NS + round(b * 1000) - off,
            }
            for i, (a, b) in enumerate(steps.get(rank, []))
        ]
        write_json_atomic(
            rank_meta_path(run_dir, rank),
            {
                "format": FORMAT_NAME + "-rank",
                "rank": rank,
                "world_size": world_size,
                "backend": "gloo",
                "host": "synth",
                "status": "ok",
                "events": len(mine),
                "steps": windows,
                "clock": {"offset_ns": off, "drift": 0.0, "t_ref_ns": T0_NS, "rtt_ns": 0},
                "meta": (rank_meta or {}).get(rank, {}),
            },
        )
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
    return run_dir


def write_parts(part_dir: Path, table: pa.Table, *, per_part: int = 7) -> None:
    """Leave ``table`` as a rank that died mid-run leaves its events: the writer's parts.

    The real writer writes them (into a scratch directory, ``per_part`` events
    a part); they are copied before it could join them into a rank file.
    """
    rank = int(part_dir.name.removeprefix(".rank-").removesuffix(".parts"))
    with tempfile.TemporaryDirectory() as scratch:
        writer = EventWriter(Path(scratch), rank, flush_events=per_part, flush_seconds=3600)
        for row in table.to_pylist():
            writer.append(tuple(row[c] for c in EVENT_COLUMNS))
        writer.flush()
        shutil.copytree(parts_dir(Path(scratch), rank), part_dir)
        writer.close()
