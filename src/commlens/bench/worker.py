"""The rank side of ``commlens bench``: ``python -m commlens.bench.worker CONFIG.json``.

Every rank runs each op and size: ``warmup`` untimed calls, a barrier, then
``iters`` calls back to back, each timed on its own (``perf_counter_ns``, or
CUDA events on GPUs, never a device synchronize per call). The per-call times
of all ranks are gathered; as in nccl-tests, a call's time is the mean over
ranks. Then one more call on fresh rank-specific data is checked. Rank 0
appends one JSON line per op and size to the results file, which the
launcher tails for its progress bar.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from commlens.bench.ops import DTYPES, all_gather_flat, element_count, make_case
from commlens.optable import bus_factor
from commlens.safefile import SMALL_LIMIT, read_json


def measure(case_run: Any, iters: int, warmup: int, device: torch.device) -> list[float]:
    """Seconds of each of ``iters`` timed calls of ``case_run`` on this rank."""
    for _ in range(warmup):
        case_run()
    dist.barrier()
    if device.type == "cuda":
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(iters)
        ]
        for start, end in events:
            start.record()
            case_run()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in events]
    times = []
    clock = time.perf_counter_ns
    for _ in range(iters):
        t0 = clock()
        case_run()
        times.append((clock() - t0) / 1e9)
    return times


def summarize(per_rank: torch.Tensor) -> dict[str, float]:
    """Latency stats from a ``[ranks, iters]`` tensor of seconds (mean over ranks per call)."""
    calls = per_rank.double().mean(dim=0)
    q = torch.quantile(calls, torch.tensor([0.5, 0.99], dtype=torch.float64))
    return {
        "time_min_s": float(calls.min()),
        "time_mean_s": float(calls.mean()),
        "time_max_s": float(calls.max()),
        "time_p50_s": float(q[0]),
        "time_p99_s": float(q[1]),
    }


def bench_one(op: str, size: int, cfg: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Run one op and size on every rank; the full result row (meaningful on rank 0)."""
    n = dist.get_world_size()
    dtype = DTYPES[cfg["dtype"]]
    elem = torch.tensor([], dtype=dtype).element_size()
    count = element_count(op, size, elem, n)
    row: dict[str, Any] = {
        "op": op,
        "size_bytes": count * elem,
        "count": count,
        "dtype": cfg["dtype"],
        "ranks": n,
        "nodes": cfg["nodes"],
    }
    if count == 0 or (op == "sendrecv" and n < 2):
        return {**row, "skipped": f"too small for {n} ranks" if count == 0 else "needs 2 ranks"}
    case = make_case(op, count, dtype, device)
    times = measure(case.run, cfg["iters"], cfg["warmup"], device)
    mine = torch.tensor(times, dtype=torch.float64, device=device)
    gathered = torch.zeros(n * len(times), dtype=torch.float64, device=device)
    all_gather_flat(gathered, mine)
    ok = torch.tensor([1 if case.check() else 0], dtype=torch.int32, device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    stats = summarize(gathered.cpu().view(n, -1))
    algbw = row["size_bytes"] / stats["time_mean_s"] / 1e9
    busbw = algbw * bus_factor(op, n)
    return {
        **row,
        "iters": len(times),
        **stats,
        "algbw_GB/s": algbw,
        "busbw_GB/s": busbw,
        "busbw_Gbit/s": busbw * 8,
        "ok": bool(ok.item()),
    }


def main(argv: list[str]) -> int:
    cfg = read_json(argv[0], limit=SMALL_LIMIT)
    backend = cfg["backend"]
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    out = Path(cfg["results"])
    try:
        for op in cfg["ops"]:
            for size in cfg["sizes"]:
                row = bench_one(op, size, cfg, device)
                if dist.get_rank() == 0:
                    with out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
