"""Rank-side jobs for the workload tests, and the single-process reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from commlens.job.parallel import ParallelDims
from commlens.job.spec import Job
from commlens.workloads.groups import build_groups
from commlens.workloads.parallelize import parallelize
from commlens.workloads.train import StepRecord, train

CPU = torch.device("cpu")


def _train(wcfg: Job) -> dict[str, Any]:
    groups = build_groups(wcfg.dims)
    par = parallelize(wcfg, groups, CPU)
    grads: dict[str, torch.Tensor] = {}

    def snapshot(r: StepRecord) -> None:
        if r.step != 0:
            return
        for name, p in par.stage.named_parameters():
            if p.grad is not None and not isinstance(p.grad, DTensor):
                grads[name] = p.grad.detach().clone()

    records = train(wcfg, par, CPU, on_step=snapshot)
    return {
        "losses": [r.loss for r in records],
        "grads": grads,
        "coords": groups.coords,
        "last": bool(par.stage.last),  # type: ignore[attr-defined]
    }


def train_jobs(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """On every rank: train each config in turn; per config this rank's results."""
    torch.manual_seed(0)
    return [_train(Job.from_dict(c)) for c in configs]


def reference(wcfg: Job) -> dict[str, Any]:
    """The same model, seed and global batch in this process, one rank, no parallelism."""
    single = dataclasses.replace(
        wcfg,
        scheme="dp",
        dims=ParallelDims(1),
        microbatches=wcfg.dims.dp * wcfg.microbatches,
        sequence_parallel=False,
    )
    return _train(single)


def global_losses(per_rank: list[dict[str, Any]]) -> list[float]:
    """Mean over data-parallel ranks of the last stage's losses (tp rank 0)."""
    rows = [r["losses"] for r in per_rank if r["last"] and r["coords"]["tp"] == 0]
    return [sum(step) / len(step) for step in zip(*rows, strict=True)]


def capture_jobs(jobs: list[tuple[dict[str, Any], str]]) -> None:
    """On every rank: train each (config, run directory) under a capture, as a worker does."""
    from pathlib import Path

    from commlens.workloads.worker import capture_workload

    for config, out in jobs:
        capture_workload(Job.from_dict(config), Path(out), CPU)
