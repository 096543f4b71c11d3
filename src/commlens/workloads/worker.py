"""One rank of ``commlens run``: ``python -m commlens.workloads.worker CONFIG.json OUT_DIR``.

Reads the torchrun environment the launcher set, joins the process group,
starts a capture into OUT_DIR with the workload in its metadata, builds the
groups and the model, trains, and stores the per-step records in this rank's
manifest entry (``meta.steps_metrics``).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import commlens
from commlens.job.spec import Job
from commlens.safefile import SMALL_LIMIT, read_json
from commlens.units import plural
from commlens.workloads.groups import build_groups
from commlens.workloads.parallelize import parallelize
from commlens.workloads.train import StepRecord, train


def device_for(backend: str) -> torch.device:
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def say(line: str) -> None:
    """One progress line of ``commlens run``, as the launcher's output shows it."""
    print(line, flush=True)


def run_workload(job: Job, device: torch.device, verbose: bool = False) -> list[StepRecord]:
    """Build and train ``job`` on this rank (the process group must exist)."""
    torch.manual_seed(job.run.seed)
    loud = verbose and dist.get_rank() == job.loss_rank
    start = time.perf_counter()
    groups = build_groups(job.dims)
    par = parallelize(job, groups, device)
    if loud:  # the first step can take long (a busy machine, many ranks): say where it is
        params = sum(p.numel() for p in par.stage.parameters())
        say(
            f"model built in {time.perf_counter() - start:.1f} s ({params:,} parameters on "
            f"rank {dist.get_rank()}); step 1/{job.run.steps} running..."
        )

    def progress(r: StepRecord) -> None:
        if loud:
            tag = " (warm-up)" if r.warmup else ""
            print(
                f"step {r.step + 1}/{job.run.steps}  rank {job.loss_rank}: loss {r.loss:.4f}  "
                f"{r.time_s:.3f} s  "
                f"{r.tokens_per_s:,.0f} tokens/s{tag}",
                flush=True,
            )

    return train(job, par, device, on_step=progress)


def capture_workload(
    job: Job, out: Path, device: torch.device, verbose: bool = False
) -> list[StepRecord]:
    """``run_workload`` under a capture into ``out``, the workload and the per-step
    records in this rank's metadata (the process group must exist)."""
    meta = {"workload": job.to_dict(), "coords": job.dims.coords(dist.get_rank())}
    with commlens.capture(out, meta=meta) as cap:
        records = run_workload(job, device, verbose=verbose)
        cap.add_meta("steps_metrics", [r.to_dict() for r in records])
    return records


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m commlens.workloads.worker CONFIG.json OUT_DIR", file=sys.stderr)
        return 2
    job = Job.from_dict(read_json(args[0], limit=SMALL_LIMIT))
    out = Path(args[1])
    device = device_for(job.run.backend)
    start = time.perf_counter()
    dist.init_process_group(job.run.backend, timeout=timedelta(minutes=10))
    if dist.get_rank() == 0:
        world = dist.get_world_size()
        say(
            f"{'all ' if world > 1 else ''}{plural(world, 'rank')} joined the process group in "
            f"{time.perf_counter() - start:.1f} s; building the model..."
        )
    try:
        capture_workload(job, out, device, verbose=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # SIGINT: stop quietly, the launcher reports it once
        sys.exit(130)
