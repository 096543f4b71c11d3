"""``commlens bench`` against a bare torch.distributed timing loop, in one run.

    python benchmarks/bench_vs_raw.py [--nproc 2] [--iters 10] [--rounds 3]
                                      [--nodes 2 --link 1gbit]   # emulated (root)

Every rank runs, for each all-reduce size, ``--rounds`` rounds that alternate
commlens's own measurement (:func:`commlens.bench.worker.bench_one`, the code
``commlens bench`` runs) with a bare loop (barrier, ``iters`` back-to-back
all-reduces, one clock read before and after, mean over ranks as nccl-tests
does). The best round of each (the least disturbed by other load on the
machine) is compared:

- busbw ratio (commlens / bare) for 1 MiB ... 64 MiB, target >= 0.95;
- latency ratio (commlens / bare) for 8 B ... 1 KiB, target <= 1.10
  (4x the rounds: small calls are cheap and the most exposed to noise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

LARGE = [1 << k for k in range(20, 27)]  # 1 MiB ... 64 MiB
SMALL = [8, 64, 1024]


def _bare(size: int, iters: int, warmup: int) -> float:
    """Mean seconds per all-reduce of ``size`` bytes (mean over ranks)."""
    import torch
    import torch.distributed as dist

    buf = torch.ones(size // 4)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    mine = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(mine)
    return float(mine.item()) / dist.get_world_size()


def rank_main(
    out: Path, iters: int, warmup: int, rounds: int, nodes: int, small_only: bool
) -> None:
    import torch
    import torch.distributed as dist

    from commlens.bench.worker import bench_one

    dist.init_process_group("gloo")
    cfg = {"dtype": "float32", "nodes": nodes, "iters": iters, "warmup": warmup}
    results = []
    for size in SMALL if small_only else SMALL + LARGE:
        ours, bare = [], []
        # Small sizes are cheap and noisy: more rounds for the same confidence.
        for _ in range(rounds * 4 if size in SMALL else rounds):
            ours.append(bench_one("all_reduce", size, cfg, torch.device("cpu"))["time_mean_s"])
            bare.append(_bare(size, iters, warmup))
        results.append({"size_bytes": size, "commlens_s": min(ours), "bare_s": min(bare)})
    if dist.get_rank() == 0:
        out.write_text(json.dumps({"n": dist.get_world_size(), "rows": results}))
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--link", default=None)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small-only", action="store_true", help="only the latency sizes")
    parser.add_argument("--rank-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_out:
        rank_main(
            Path(args.rank_out), args.iters, args.warmup, args.rounds, args.nodes, args.small_only
        )
        return 0

    from commlens.bench.runner import rank_env
    from commlens.bench.sizes import format_size
    from commlens.launch import launch_ranks
    from commlens.optable import bus_factor

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--rank-out", str(out), "--iters", str(args.iters),
                "--warmup", str(args.warmup), "--rounds", str(args.rounds),
                "--nodes", str(args.nodes)]  # fmt: skip
        argv += ["--small-only"] if args.small_only else []
        if args.nodes > 1 or args.link:
            from commlens.netem import launch_emulated

            res = launch_emulated(argv, args.nproc, args.nodes, args.link, env=rank_env())
        else:
            res = launch_ranks(argv, args.nproc, env=rank_env())
        if not res.ok:
            print(f"ranks failed: {res.exit_codes}", file=sys.stderr)
            return 1
        data = json.loads(out.read_text())
    factor = bus_factor("all_reduce", data["n"])
    print(f"all_reduce, {data['n']} ranks, {args.nodes} node(s), link {args.link or 'none'}")
    print(f"{'size':>6} {'commlens (µs)':>14} {'bare (µs)':>11} {'busbw ours (GB/s)':>18} "
          f"{'busbw bare (GB/s)':>18} {'ratio':>7}")  # fmt: skip
    bw_ratios, lat_ratios = [], []
    for row in data["rows"]:
        size, ours, bare = row["size_bytes"], row["commlens_s"], row["bare_s"]
        bw_ours, bw_bare = size / ours / 1e9 * factor, size / bare / 1e9 * factor
        if size in LARGE:
            ratio = bw_ours / bw_bare
            bw_ratios.append(ratio)
        else:
            ratio = ours / bare
            lat_ratios.append(ratio)
        print(f"{format_size(size):>6} {ours * 1e6:14.1f} {bare * 1e6:11.1f} {bw_ours:18.3f} "
              f"{bw_bare:18.3f} {ratio:7.3f}")  # fmt: skip
    if bw_ratios:
        bw = min(bw_ratios)
        verdict = "OK" if bw >= 0.95 else "MISS"
        print(
            f"busbw ratio 1-64 MiB (commlens/bare): min {bw:.3f}, median "
            f"{statistics.median(bw_ratios):.3f}  target >= 0.95  {verdict}"
        )
    lat = max(lat_ratios)
    verdict = "OK" if lat <= 1.10 else "MISS"
    print(
        f"latency ratio 8 B-1 KiB (commlens/bare): max {lat:.3f}, median "
        f"{statistics.median(lat_ratios):.3f}  target <= 1.10  {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
