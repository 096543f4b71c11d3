"""What tracing costs: per intercepted call, and per training step.

Two measurements in one invocation, arms interleaved so machine noise hits
all of them alike:

1. Added time per intercepted call: blocks of 2,000 ``all_reduce`` calls on a
   4-element tensor in a one-rank gloo group, alternately untraced and traced;
   the median of the per-call differences over the blocks.
2. Step time of the same 2-rank DDP training, untraced, traced, and under
   ``torch.profiler``, each arm a fresh pair of processes, repeated in turn;
   the ratio of median step times to the untraced arm.

Targets: ≤ 5 µs per call (median), traced/untraced ≤ 1.03.

    python benchmarks/capture_overhead.py [--rounds 3] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist

import commlens
from commlens.launch import free_port, launch_ranks


def per_call_overhead(blocks: int, calls: int) -> tuple[float, float, float, float]:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(4)

    def block() -> tuple[float, float]:
        # Wall time, and this thread's CPU time (robust to a busy machine).
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        return (time.perf_counter() - t0) / calls, (time.thread_time() - c0) / calls

    return _alternate(block, blocks)


def functional_overhead(blocks: int, calls: int) -> tuple[float, float, float, float]:
    """The same for functional collectives (DTensor's path): issue plus wait_tensor."""
    import torch.distributed._functional_collectives as funcol

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(4)
    group = dist.group.WORLD

    def block() -> tuple[float, float]:
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            funcol.wait_tensor(funcol.all_reduce(t, "sum", group))
        return (time.perf_counter() - t0) / calls, (time.thread_time() - c0) / calls

    return _alternate(block, blocks)


def _alternate(block: Any, blocks: int) -> tuple[float, float, float, float]:
    block()
    plain, traced = [], []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(blocks):
            plain.append(block())
            with commlens.capture(out, align_clocks=False):
                traced.append(block())
            for f in os.listdir(out):
                p = os.path.join(out, f)
                if os.path.isfile(p):
                    os.remove(p)
    dist.destroy_process_group()
    diffs = [b[0] - a[0] for a, b in zip(plain, traced, strict=True)]
    cpu = [b[1] - a[1] for a, b in zip(plain, traced, strict=True)]
    return (
        statistics.median(p[0] for p in plain),
        statistics.median(p[0] for p in traced),
        statistics.median(diffs),
        statistics.median(cpu),
    )


def rank_main(mode: str, steps: int, result: str) -> None:
    """One rank of the DDP arm ``mode``; rank 0 writes the median step time."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train() -> list[float]:
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = DDP(nn.Sequential(*[nn.Linear(512, 512) for _ in range(6)]))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(64, 512)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        dist.barrier()
        dist.destroy_process_group()
        return times[5:]

    if mode == "traced":
        with tempfile.TemporaryDirectory() as out, commlens.capture(out):
            times = train()
    elif mode == "profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            times = train()
    else:
        times = train()
    if int(os.environ["RANK"]) == 0:
        with open(result, "w") as fh:
            json.dump(statistics.median(times), fh)


def step_ratios(rounds: int, steps: int) -> dict[str, list[float]]:
    arms: dict[str, list[float]] = {"untraced": [], "traced": [], "profiler": []}
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "median.json")
        for _ in range(rounds):
            for mode in arms:
                argv = [sys.executable, __file__, "--rank-main", mode, str(steps), result]
                launch = launch_ranks(argv, 2)
                if not launch.ok:
                    raise SystemExit(f"{mode} arm failed: exit codes {launch.exit_codes}")
                with open(result) as fh:
                    arms[mode].append(float(json.load(fh)))
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--rank-main", nargs=3, metavar=("MODE", "STEPS", "RESULT"))
    args = parser.parse_args()
    if args.rank_main:
        mode, steps, result = args.rank_main
        rank_main(mode, int(steps), result)
        return
    plain, traced, diff, cpu = per_call_overhead(args.blocks, 2000)
    print(
        f"per call: untraced {plain * 1e6:.2f} us, traced {traced * 1e6:.2f} us, "
        f"added {diff * 1e6:.2f} us wall, {cpu * 1e6:.2f} us CPU "
        f"(median of {args.blocks} blocks; target <= 5 us)"
    )
    plain, traced, diff, cpu = functional_overhead(args.blocks, 1000)
    print(
        f"functional all_reduce + wait: untraced {plain * 1e6:.2f} us, traced "
        f"{traced * 1e6:.2f} us, added {diff * 1e6:.2f} us wall, {cpu * 1e6:.2f} us CPU"
    )
    arms = step_ratios(args.rounds, args.steps)
    base = statistics.median(arms["untraced"])
    for mode, values in arms.items():
        med = statistics.median(values)
        print(
            f"step {mode:9s}: median {med * 1e3:7.2f} ms  ratio {med / base:.3f}  "
            f"(rounds: {', '.join(f'{v * 1e3:.2f}' for v in values)} ms)"
        )
    print(
        f"traced/untraced {statistics.median(arms['traced']) / base:.3f} (target <= 1.03); "
        f"profiler/untraced {statistics.median(arms['profiler']) / base:.3f}"
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
