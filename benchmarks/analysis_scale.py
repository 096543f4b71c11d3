"""Benchmark: ``commlens report --format json`` and ``compare`` on 10 M events.

    .venv/bin/python benchmarks/analysis_scale.py [--events 10000000] [--ranks 8]

Writes a synthetic run (8 ranks; per step: tensor-parallel all-reduces in
pairs of ranks, data-parallel bucket all-reduces and an all-gather over the
world, pipeline sends/receives, with jittered arrivals) straight with Arrow
(the generator is not timed), then runs each command as a child process and
reports its wall time, peak RSS (from ``wait4``) and events/s. Target on a
2-core machine: <= 15 s and <= 2 GiB each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _child import run_child

from commlens.trace.manifest import FORMAT_NAME, rank_meta_path, write_json_atomic
from commlens.trace.schema import EVENT_SCHEMA, RANK_KEY

T0 = 1_700_000_000_000_000_000
# per step: (op, group kind, size bytes, phase, module, count per step)
PATTERN = [
    ("all_reduce", "tp", 1 << 16, "forward", "layers.{i}.attn", 500),
    ("all_reduce", "tp", 1 << 16, "backward", "layers.{i}.mlp", 500),
    ("send", "pp", 1 << 18, "forward", "", 60),
    ("recv", "pp", 1 << 18, "backward", "", 60),
    ("all_reduce", "dp", 25 << 20, "backward", "", 100),
    ("all_gather", "dp", 1 << 22, "optimizer", "", 30),
]


def _strings(indices: np.ndarray, values: list[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32()), pa.array(values, pa.string())
    ).cast(pa.string())


def make_run(out: Path, n_events: int, world: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    per_step = sum(p[-1] for p in PATTERN)
    per_rank = n_events // world
    steps = max(1, per_rank // per_step)
    kinds = np.concatenate([np.full(p[-1], i) for i, p in enumerate(PATTERN)])
    rng = np.random.default_rng(0)
    step_ns = 200_000_000
    ops = sorted({p[0] for p in PATTERN})
    modules = sorted({p[4].format(i=i) for p in PATTERN for i in range(4)})
    for rank in range(world):
        kind = np.tile(kinds, steps)[:per_rank]
        n = kind.size
        step = np.repeat(np.arange(steps, dtype=np.int32), per_step)[:n]
        slot = np.tile(np.arange(per_step), steps)[:n]
        issue = T0 + step.astype(np.int64) * step_ns + slot * (step_ns // per_step)
        issue += rng.integers(0, 20_000, n) + (50_000 if rank == world - 1 else 0)
        dur = rng.integers(20_000, 150_000, n)
        is_dp = np.isin(kind, [4, 5])
        tp_pair = [rank - rank % 2, rank - rank % 2 + 1]
        peer = rank ^ 1
        sizes = np.array([p[2] for p in PATTERN], np.int64)[kind]
        gsize = np.where(is_dp, world, 2).astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(gsize)]).astype(np.int32)
        values = np.empty(int(offsets[-1]), np.int32)
        world_ranks = np.arange(world, dtype=np.int32)
        pair = np.array(tp_pair, np.int32)
        starts = offsets[:-1]
        for j in range(world):  # data parallel: the world
            values[starts[is_dp] + j] = world_ranks[j]
        for j in range(2):  # tensor parallel: the pair of ranks
            values[starts[~is_dp] + j] = pair[j]
        p2p = np.isin(kind, [2, 3])
        values_p2p = np.array(sorted([rank, peer]), np.int32)
        for j in range(2):  # pipeline: this rank and its peer
            values[starts[p2p] + j] = values_p2p[j]
        op_idx = np.array([ops.index(p[0]) for p in PATTERN])[kind]
        layer = slot % 4
        mod_names = [p[4] for p in PATTERN]
        mod_idx = np.array(
            [
                modules.index(mod_names[k].format(i=i))
                for k, i in zip(kind[:per_step], layer[:per_step], strict=True)
            ]
        )
        mod_idx = np.tile(mod_idx, steps)[:n]
        pg_idx = np.where(is_dp, 0, np.where(p2p, 2, 1))
        role_idx = np.where(is_dp, 0, np.where(p2p, 2, 1))
        phases = ["forward", "backward", "optimizer", "other"]
        phase_idx = np.array([phases.index(p[3]) for p in PATTERN])[kind]
        table = pa.table(
            {
                "rank": pa.array(np.full(n, rank, np.int32)),
                "seq": pa.array(np.arange(n, dtype=np.int64)),
                "op": _strings(op_idx, ops),
                "api": _strings(is_dp.astype(np.int32), ["python", "ddp_hook"]),
                "pg_name": _strings(pg_idx, ["0", f"tp{rank // 2}", f"pp{rank // 2}"]),
                "pg_ranks": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
                "group_size": pa.array(gsize),
                "role": _strings(role_idx, ["dp", "tp", "pp"]),
                "dtype": _strings(np.zeros(n, np.int32), ["bfloat16"]),
                "count": pa.array(sizes // 2),
                "bytes_in": pa.array(sizes),
                "bytes_out": pa.array(sizes),
                "size_bytes": pa.array(sizes),
                "peer": pa.array(np.where(p2p, peer, 0).astype(np.int32), mask=~p2p),
                "is_async": pa.array(is_dp),
                "t_issue_ns": pa.array(issue),
                "t_end_ns": pa.array(issue + dur),
                "t_wait_ns": pa.array(np.where(is_dp, dur // 3, dur)),
                "duration_s": pa.array(dur / 1e9),
                "step": pa.array(step),
                "phase": _strings(phase_idx, phases),
                "module": _strings(mod_idx, modules),
            },
            schema=EVENT_SCHEMA.with_metadata(
                {**(EVENT_SCHEMA.metadata or {}), RANK_KEY: str(rank).encode()}
            ),
        )
        pq.write_table(
            table, out / f"rank-{rank:05d}.parquet", compression="zstd", row_group_size=16384 * 8
        )
        windows = [
            {"step": s, "t_start_ns": T0 + s * step_ns, "t_end_ns": T0 + (s + 1) * step_ns}
            for s in range(steps)
        ]
        write_json_atomic(
            rank_meta_path(out, rank),
            {
                "format": FORMAT_NAME + "-rank",
                "rank": rank,
                "world_size": world,
                "backend": "gloo",
                "host": "bench",
                "status": "ok",
                "events": n,
                "steps": windows,
                "clock": {"offset_ns": 0, "drift": 0.0, "t_ref_ns": T0},
                "meta": {},
            },
        )
    write_json_atomic(
        out / "run.json",
        {"format": FORMAT_NAME, "format_version": 1, "world_size": world, "backend": "gloo"},
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--keep", help="write the run here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.keep) if args.keep else Path(tmp) / "run"
        t = time.perf_counter()
        make_run(run, args.events, args.ranks)
        size = sum(f.stat().st_size for f in run.iterdir())
        print(
            f"generated {args.events:,} events over {args.ranks} ranks "
            f"({size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s"
        )
        exe = [sys.executable, "-m", "commlens"]
        results = {}
        for name, cmd in (
            ("report --format json", [*exe, "report", str(run), "--format", "json"]),
            ("compare RUN RUN", [*exe, "compare", str(run), str(run), "--format", "json"]),
        ):
            used = run_child(cmd)
            print(
                f"{name:22s} wall {used.wall_s:6.2f} s  cpu {used.cpu_s:6.2f} s  "
                f"peak RSS {used.peak_rss_gib:5.2f} GiB  "
                f"{args.events / used.wall_s / 1e6:5.2f} M events/s  {used.verdict(15, 2)}"
            )
            results[name] = used.to_dict()
        load = os.getloadavg()[0]
        print(
            f"load average during the run: {load:.1f} on {os.cpu_count()} CPUs "
            "(wall times grow with other work on the machine; cpu does not)"
        )
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
