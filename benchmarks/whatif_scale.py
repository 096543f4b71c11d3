"""Benchmark: ``commlens whatif`` on synthetic runs of 1 M events and more.

    .venv/bin/python benchmarks/whatif_scale.py [--events 1000000[,3000000,...]]
        [--nets tcp-10g] [--keep DIR] [--stages]

Writes a causally consistent synthetic run straight with Arrow (not timed):
8 ranks as pp 2 x dp 2 x tp 2; per step, per micro-batch (4), eight blocking
tensor-parallel all-reduces and a pipeline send/recv each way, then eight
DDP-like async bucket all-reduces (no recorded wait) and one all-gather over
the world. All ranks issue slot k within 20 us of each other and every op
ends 40-60 us after its slot opened, so the replay with measured times must
give the steps back exactly. Then it runs ``commlens whatif RUN --net NETS
--format json`` as a child process (self-check replay plus one replay per
network) and prints, per size, a table of its wall and CPU time, peak RSS
(``wait4``) and the self-check; ``--stages`` adds the stages timed in this
process. Target on 2 cores (issue 17): 1 M events in <= 10 s and <= 2 GiB,
memory bounded at 10 M. The machine may be shared, so time is judged on the
child's CPU time (user + system; at most 10 s per million events), not its
wall time, which is printed beside it.
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
from _child import Usage, run_child

from commlens.trace.manifest import FORMAT_NAME, rank_meta_path, write_json_atomic
from commlens.trace.schema import EVENT_SCHEMA, RANK_KEY

T0 = 1_700_000_000_000_000_000
WORLD = 8
MICRO, TP_PER_MICRO, BUCKETS = 4, 8, 8
SLOT_NS = 100_000
ACT, BUCKET, GATHER = 1 << 16, 25 << 20, 1 << 20


def _rank_pattern(rank: int) -> list[tuple[str, str, tuple[int, ...], int, int, bool, str]]:
    """One step of ``rank``: (op, group name, members, size, peer, async, role) per slot."""
    stage, tp = rank // 4, (rank // 2) * 2
    pp_peer, dp_peer = rank ^ 4, rank ^ 2
    tp_group = (f"tp{rank // 2}", (tp, tp + 1))
    dp_group = (f"dp{stage}{rank % 2}", tuple(sorted((rank, dp_peer))))
    pp_group = (f"pp{rank % 4}", (rank % 4, rank % 4 + 4))
    slots = []
    for direction in ("forward", "backward"):
        for _ in range(MICRO):
            tp_ops = [("all_reduce", *tp_group, ACT, -1, False, "tp")] * TP_PER_MICRO
            sends = (stage == 0) == (direction == "forward")
            p2p = ("send" if sends else "recv", *pp_group, ACT, pp_peer, False, "pp")
            slots += [*tp_ops, p2p] if direction == "forward" else [p2p, *tp_ops]
    slots += [("all_reduce", *dp_group, BUCKET, -1, True, "dp")] * BUCKETS
    slots += [("all_gather", "0", tuple(range(WORLD)), GATHER, -1, False, "")]
    return slots


def _strings(values: list[str]) -> pa.Array:
    names = sorted(set(values))
    index = {v: i for i, v in enumerate(names)}
    codes = pa.array([index[v] for v in values], pa.int32())
    return pa.DictionaryArray.from_arrays(codes, pa.array(names)).cast(pa.string())


def make_run(out: Path, n_events: int) -> int:
    """Write the run; returns its number of steps."""
    out.mkdir(parents=True, exist_ok=True)
    per_step = len(_rank_pattern(0))
    steps = max(2, n_events // (WORLD * per_step))
    step_ns = per_step * SLOT_NS
    rng = np.random.default_rng(0)
    for rank in range(WORLD):
        pattern = _rank_pattern(rank)
        n = per_step * steps
        slot = np.arange(n, dtype=np.int64)
        step = slot // per_step
        base = T0 + slot * SLOT_NS
        issue = base + rng.integers(0, 20_000, n)
        end = base + rng.integers(40_000, 60_000, n)
        cols = list(zip(*pattern, strict=True))
        op, pg, members, size, peer, is_async, role = (np.array(c, dtype=object) for c in cols)
        rep = np.tile(np.arange(per_step), steps)
        async_ = np.array(is_async[rep], dtype=bool)
        sizes = np.array(size[rep], dtype=np.int64)
        peers = np.array(peer[rep], dtype=np.int64)
        ranks_list = [list(m) for m in members[rep]]
        table = pa.table(
            {
                "rank": pa.array(np.full(n, rank, np.int32)),
                "seq": pa.array(slot),
                "op": _strings(list(op[rep])),
                "api": _strings(["python"] * n),
                "pg_name": _strings(list(pg[rep])),
                "pg_ranks": pa.array(ranks_list, pa.list_(pa.int32())),
                "group_size": pa.array([len(m) for m in ranks_list], pa.int32()),
                "role": _strings(list(role[rep])),
                "dtype": _strings(["float32"] * n),
                "count": pa.array(sizes // 4),
                "bytes_in": pa.array(sizes),
                "bytes_out": pa.array(sizes),
                "size_bytes": pa.array(sizes),
                "peer": pa.array(peers.astype(np.int32), mask=peers < 0),
                "is_async": pa.array(async_),
                "t_issue_ns": pa.array(issue),
                "t_end_ns": pa.array(end),
                "t_wait_ns": pa.array(np.where(async_, 0, end - issue)),
                "duration_s": pa.array((end - issue) / 1e9),
                "step": pa.array(step.astype(np.int32)),
                "phase": _strings(["other"] * n),
                "module": _strings([""] * n),
            },
            schema=EVENT_SCHEMA.with_metadata(
                {**(EVENT_SCHEMA.metadata or {}), RANK_KEY: str(rank).encode()}
            ),
        )
        pq.write_table(table, out / f"rank-{rank:05d}.parquet", row_group_size=1 << 17)
        windows = [
            {"step": s, "t_start_ns": T0 + s * step_ns, "t_end_ns": T0 + (s + 1) * step_ns}
            for s in range(steps)
        ]
        write_json_atomic(
            rank_meta_path(out, rank),
            {
                "format": FORMAT_NAME + "-rank",
                "rank": rank,
                "world_size": WORLD,
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
        {"format": FORMAT_NAME, "format_version": 1, "world_size": WORLD, "backend": "gloo"},
    )
    return steps


def kept_run(run: Path) -> int:
    """Steps of a run this script wrote in ``run`` before (``--keep``), else 0."""
    meta = rank_meta_path(run, WORLD - 1)
    if not (run / "run.json").exists() or not meta.exists():
        return 0
    return len(json.loads(meta.read_text())["steps"])


def stages(run: Path, nets: str) -> list[tuple[str, float]]:
    """CPU seconds of each stage of the study, in this process."""
    from commlens.predict.profiles import get_profile, get_profiles
    from commlens.predict.topology import Fabric
    from commlens.whatif.costing import modelled
    from commlens.whatif.durations import measured
    from commlens.whatif.model import build_program
    from commlens.whatif.optimes import OpTimes
    from commlens.whatif.replay import replay
    from commlens.whatif.source import read_trace

    out = []
    t = time.process_time()
    trace = read_trace(run)
    out.append(("read", time.process_time() - t))
    t = time.process_time()
    prog = build_program(trace)
    out.append(("build model", time.process_time() - t))
    t = time.process_time()
    replay(prog, OpTimes(measured(prog)))
    out.append(("replay, measured times", time.process_time() - t))
    fabric = Fabric(inter=get_profiles(nets)[0], intra=get_profile("loopback"))
    t = time.process_time()
    replay(prog, OpTimes(modelled(prog, fabric)))
    out.append((f"replay, {fabric.inter.name}", time.process_time() - t))
    return out


CPU_S_PER_M = 10.0
"""Target CPU seconds per million events (issue 17: 1 M in <= 10 s on 2 cores)."""
RSS_GIB = 2.0
"""Target peak resident set at every size."""


def verdict(used: Usage, events: int) -> str:
    """OK within the targets (CPU time, peak RSS), else why not."""
    if used.rc:
        return f"FAILED rc={used.rc}"
    cpu_ok = used.cpu_s <= CPU_S_PER_M * events / 1e6
    return "OK" if cpu_ok and used.peak_rss_gib <= RSS_GIB else "OVER TARGET"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1000000", help="comma list of run sizes")
    parser.add_argument("--nets", default="tcp-10g")
    parser.add_argument(
        "--keep", help="write the runs under this folder and keep them (reused when there)"
    )
    parser.add_argument("--stages", action="store_true", help="time the stages in-process")
    args = parser.parse_args()
    sizes = [int(n) for n in args.events.split(",")]
    header = (
        f"{'events':>12} {'wall s':>8} {'CPU s':>8} {'peak RSS GiB':>13} "
        f"{'bytes/event':>12} {'self-check':>11}  verdict"
    )
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            run = Path(args.keep or tmp) / f"run-{size}"
            t = time.perf_counter()
            steps = kept_run(run) or make_run(run, size)
            n = WORLD * steps * len(_rank_pattern(0))
            took = time.perf_counter() - t
            print(f"{n:,} events, {WORLD} ranks, {steps} steps, written or found in {took:.1f} s")
            cmd = [sys.executable, "-m", "commlens", "whatif", str(run), "--net", args.nets]
            answer = Path(tmp) / "answer.json"
            used = run_child([*cmd, "--format", "json"], answer)
            check = json.loads(answer.read_text())["self_check"] if used.rc == 0 else {}
            judged = verdict(used, n)
            ok = ok and judged == "OK"
            rows.append(
                f"{n:>12,} {used.wall_s:8.2f} {used.cpu_s:8.2f} {used.peak_rss_gib:13.2f} "
                f"{used.peak_rss_gib * 2**30 / n:12.0f} "
                f"{check.get('max_step_error', float('nan')):11.1e}  {judged}"
            )
            if args.stages:
                for name, seconds in stages(run, args.nets):
                    print(f"  {name:28s} {seconds:6.2f} s CPU")
    print(f"\ncommlens whatif --net {args.nets} --format json (a child process):")
    print(header)
    print("\n".join(rows))
    print(
        f"targets: CPU <= {CPU_S_PER_M:.0f} s per million events, peak RSS <= {RSS_GIB:.0f} GiB;"
        f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
