"""Memory one rank needs for a job, to refuse what cannot fit before starting it."""

from __future__ import annotations

from dataclasses import dataclass

from commlens.errors import UsageError
from commlens.job.models import param_shapes, stage_layers
from commlens.job.spec import Job

PROCESS_BASELINE_BYTES = 228_000_000
"""Host memory one rank takes before it holds any tensor, in bytes.

Measured as the peak RSS of a bare ``python -c "import torch, torch.distributed"``
(torch 2.13 CPU, Python 3.11, Linux x86-64): 223,000 KiB = 228 MB, of which
146 MB private and 77 MB shared libraries. A ``commlens run`` rank, with
commlens imported and a gloo group joined, peaked at 311 MiB (201 MiB
private); the bare import is the floor every rank pays.
"""

MAX_LOCAL_RANKS = 512
"""Most ranks ``commlens run`` and ``commlens bench`` start on one host.

Each rank is a process with its own copy of torch (:data:`PROCESS_BASELINE_BYTES`),
and gloo opens a socket to every peer, so past a few hundred ranks a host
spends its memory and file descriptors on processes, not on the job.
"""


def check_local_ranks(nproc: int) -> None:
    """A one-line :class:`UsageError` unless 1 <= ``nproc`` <= :data:`MAX_LOCAL_RANKS`."""
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    if nproc > MAX_LOCAL_RANKS:
        raise UsageError(
            f"--nproc {nproc:,} is more ranks than one host runs (at most {MAX_LOCAL_RANKS}; "
            f"each is a process of at least {PROCESS_BASELINE_BYTES / 1e6:.0f} MB)"
        )


def host_bytes(model_bytes_per_rank: int, ranks: int, on_gpu: bool = False) -> int:
    """Host memory ``ranks`` local processes need: each its baseline, plus (on CPU) its share."""
    per_rank = PROCESS_BASELINE_BYTES + (0 if on_gpu else model_bytes_per_rank)
    return per_rank * ranks


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs, by kind (an estimate for refusing impossible runs)."""

    params: int
    grads: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations


def estimate_memory(job: Job) -> MemoryEstimate:
    """Peak bytes on the busiest rank (the first pipeline stage) of ``job``.

    Parameters, gradients and AdamW's two moments are kept in the training
    dtype (pure fp32 or pure bf16); ZeRO-1 shards the moments, ZeRO-2 also the
    gradients, ZeRO-3 also the parameters over dp. Activations follow
    Korthikanti et al. (s·b·h·(34 + 5·a·s/h) bytes per layer in 16 bit, ÷tp;
    2·s·b·h with recomputation) times the micro-batches in flight, plus logits.
    """
    cfg, scheme, beta = job.model, job.scheme, job.dtype_bytes
    dp, tp, pp = job.dims.dp, job.dims.tp, job.dims.pp
    shapes = param_shapes(cfg, tp=tp, pp=pp, pp_stage=0)
    n = 0
    for _, shape in shapes:
        numel = 1
        for d in shape:
            numel *= d
        n += numel
    p = g = n * beta
    o = 2 * n * beta
    if scheme in ("zero1", "zero2", "zero3"):
        o //= dp
    if scheme in ("zero2", "zero3"):
        g //= dp
    if scheme == "zero3":
        p //= dp
    s, b, h, k = job.seq_len, job.micro_batch, cfg.hidden, job.microbatches
    per_layer = s * b * h * (34 + 5 * cfg.heads * s / h) / tp * beta / 2
    if job.recompute:
        per_layer = 2 * s * b * h * beta
    layers = len(stage_layers(cfg.layers, pp, 0)) + cfg.decoder_layers
    in_flight = k if job.schedule == "gpipe" else min(pp, k)
    logits = 3 * s * b * (cfg.vocab // tp) * 4 if pp == 1 else 0
    act = int(per_layer * layers * in_flight + logits)
    return MemoryEstimate(params=p, grads=g, optimizer=o, activations=act)
