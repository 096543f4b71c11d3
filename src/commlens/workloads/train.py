"""The training loop: synthetic micro-batches, forward/backward by scheme, AdamW.

Per step and rank it records the wall time, the loss (on the last pipeline
stage: the mean over this data-parallel rank's micro-batches), tokens/s of
the whole job and model TFLOP/s per rank (conventions §2 formula).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from commlens.job.spec import Job
from commlens.workloads.data import Batch, global_batch, microbatch
from commlens.workloads.parallelize import Parallelized
from commlens.workloads.pipeline import P2P, gpipe, one_f_one_b


@dataclass(frozen=True)
class StepRecord:
    """One training step as one rank saw it."""

    step: int
    time_s: float
    loss: float | None
    tokens_per_s: float
    tflops: float
    warmup: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_microbatches(job: Job, par: Parallelized, step: int, device: torch.device) -> list[Batch]:
    """This data-parallel rank's micro-batches of ``step``."""
    batch = global_batch(job.model, job.seq_len, job.global_batch, step, job.run.seed)
    d, k = par.groups.coords["dp"], job.microbatches
    return [microbatch(batch, d * k + j, job.micro_batch, device) for j in range(k)]


def forward_backward(
    job: Job, par: Parallelized, mbs: list[Batch], device: torch.device
) -> float | None:
    """Run every micro-batch forward and backward; the mean loss on the last stage."""
    k = len(mbs)
    losses: list[torch.Tensor] = []
    stage = par.stage

    def forward(i: int, x: torch.Tensor | None) -> torch.Tensor:
        out: torch.Tensor = par.model(mbs[i], x)
        if stage.last:  # type: ignore[attr-defined]
            losses.append(out.detach())
            return out / k  # the step's loss is the mean over micro-batches
        return out

    dims = par.groups.dims
    if dims.pp == 1:
        for i in range(k):
            with par.no_sync(last_microbatch=i == k - 1):
                forward(i, None).backward()
    else:
        tokens = job.seq_len // (dims.tp if par.tp.sequence_parallel else 1)
        shape = (tokens, job.micro_batch, job.model.hidden)
        p2p = P2P(par.groups, shape, next(stage.parameters()).dtype, device)
        if job.schedule == "gpipe":
            gpipe(forward, p2p, k)
        else:
            one_f_one_b(forward, p2p, k, par.groups.stage, dims.pp)
    return float(torch.stack(losses).float().mean()) if losses else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # once per step, for the step time only


def train(
    job: Job,
    par: Parallelized,
    device: torch.device,
    on_step: Callable[[StepRecord], None] | None = None,
) -> list[StepRecord]:
    """Train ``job.run.steps`` steps; one record per step."""
    flops_per_rank = job.flops_per_rank
    tokens = job.global_batch * job.seq_len
    records = []
    for step in range(job.run.steps):
        mbs = rank_microbatches(job, par, step, device)
        _sync(device)
        t0 = time.perf_counter()
        par.optimizer.zero_grad(set_to_none=True)
        loss = forward_backward(job, par, mbs, device)
        par.finish_grads()
        par.optimizer.step()  # capture counts a step when the optimizer steps
        _sync(device)
        elapsed = time.perf_counter() - t0
        record = StepRecord(
            step=step,
            time_s=elapsed,
            loss=loss,
            tokens_per_s=tokens / elapsed,
            tflops=flops_per_rank / elapsed / 1e12,
            warmup=step < job.run.warmup_steps,
        )
        records.append(record)
        if on_step is not None:
            on_step(record)
    return records
