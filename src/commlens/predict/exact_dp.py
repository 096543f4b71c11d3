"""Data-parallel calls exactly as the workloads' schemes issue them
(``workloads/parallelize.py``), over the rank's dp group, only when dp > 1.

- ``dp``, ``tp`` and ``3d`` without stages — DDP: gradient buckets
  (:mod:`commlens.predict.buckets`), one all-reduce per bucket per step (the
  loop accumulates micro-batches under ``no_sync``). Step 0 has one bucket;
  the rebuilt ones are 25 MiB from the first on, since the workloads pass
  ``bucket_cap_mb=25`` explicitly (which turns off PyTorch's 1 MiB first bucket).
  Step 0 also holds DDP's start-up sync: one coalesced broadcast of every
  parameter from dp rank 0 (``dist._broadcast_coalesced``).
- ``pp`` and ``3d`` with stages — the explicit ``GradSync`` after the
  pipeline's backward: gradients in reverse registration order, a bucket
  closed as soon as it holds 25 MiB (no small first bucket), same every step.
- ``zero1`` — DDP for the gradients plus ``ZeroRedundancyOptimizer``: after
  each optimizer step every parameter is broadcast from the rank that owns
  it (``parameters_as_bucket_view=False``: one broadcast per parameter; each
  rank issues all of them, as sender or receiver).
- ``zero2`` / ``zero3`` — FSDP2 ``fully_shard`` on every transformer layer
  and on the root (embeddings, final norm, head), with an explicit
  ``reshard_after_forward`` (False / True, the root included). Per unit and
  micro-batch: one all-gather of the padded flat parameters before forward
  (zero3: again before backward) and one reduce-scatter of the padded flat
  gradients after backward; each parameter's dim 0 is padded to a multiple
  of the dp size. On gloo the reduce-scatter runs as an all-reduce inside
  torch, but the trace records reduce_scatter with the same S.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from commlens.job.models import param_shapes
from commlens.job.spec import Job
from commlens.predict.buckets import DEFAULT_BUCKET_CAP_BYTES, assign_buckets, ddp_bucket_bytes
from commlens.predict.calls import PredictedCall

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: the parameters one all-gather / reduce-scatter moves."""

    name: str
    shapes: tuple[Shape, ...]
    is_root: bool = False

    def padded_bytes(self, n: int, dtype_bytes: int) -> int:
        """S of the unit's all-gather: n × Σ ⌈dim0 / n⌉ · rest, in bytes."""
        per_rank = 0
        for shape in self.shapes:
            rows = shape[0] if shape else 1
            rest = math.prod(shape[1:]) if len(shape) > 1 else 1
            per_rank += math.ceil(rows / n) * rest
        return per_rank * n * dtype_bytes


def rank_params(job: Job, rank: int) -> list[tuple[str, Shape]]:
    c = job.dims.coords(rank)
    return param_shapes(job.model, job.dims.tp, c["tp"], job.dims.pp, c["pp"])


def fsdp_units(params: Sequence[tuple[str, Shape]]) -> list[Unit]:
    """Units in forward order: one per layer (``blocks.N``, ``encoder.blocks.N``), then the root."""
    layers: dict[str, list[Shape]] = {}
    root: list[Shape] = []
    for name, shape in params:
        parts = name.split(".")
        if "blocks" in parts:
            i = parts.index("blocks")
            layers.setdefault(".".join(parts[: i + 2]), []).append(shape)
        else:
            root.append(shape)
    units = [Unit(name, tuple(shapes)) for name, shapes in layers.items()]
    if root:
        units.append(Unit("root", tuple(root), is_root=True))
    return units


def ddp_calls(
    job: Job, rank: int, group: tuple[int, ...], rebuilt: bool, syncs: int
) -> list[PredictedCall]:
    grads = [math.prod(shape) * job.dtype_bytes for _, shape in rank_params(job, rank)]
    sizes = ddp_bucket_bytes(grads, rebuilt=rebuilt, first_bucket_bytes=DEFAULT_BUCKET_CAP_BYTES)
    calls = []
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        calls.append(
            PredictedCall(
                "all_reduce",
                "dp",
                group,
                size,
                syncs,
                "backward",
                f"gradient bucket {i}",
                overlap=not last,
            )
        )
    return calls


def zero1_broadcasts(job: Job, rank: int, group: tuple[int, ...]) -> list[PredictedCall]:
    params = rank_params(job, rank)
    return [
        PredictedCall(
            "broadcast",
            "dp",
            group,
            math.prod(shape) * job.dtype_bytes,
            1,
            "optimizer",
            f"updated {name}",
        )
        for name, shape in params
    ]


def grad_sync_calls(job: Job, rank: int, group: tuple[int, ...]) -> list[PredictedCall]:
    """The pipeline's explicit bucketed gradient all-reduce (``GradSync``)."""
    grads = [math.prod(shape) * job.dtype_bytes for _, shape in rank_params(job, rank)]
    ready = list(reversed(grads))
    buckets = assign_buckets(ready, [DEFAULT_BUCKET_CAP_BYTES], keep_order=True)
    return [
        PredictedCall(
            "all_reduce", "dp", group, sum(ready[i] for i in b), 1, "other", f"gradient bucket {j}"
        )
        for j, b in enumerate(buckets)
    ]


def fsdp_calls(job: Job, rank: int, group: tuple[int, ...], reshard: bool) -> list[PredictedCall]:
    n, k, beta = len(group), job.microbatches, job.dtype_bytes
    calls = []
    for unit in fsdp_units(rank_params(job, rank)):
        size = unit.padded_bytes(n, beta)
        calls.append(
            PredictedCall(
                "all_gather", "dp", group, size, k, "forward", f"{unit.name} params", overlap=True
            )
        )
        if reshard:
            calls.append(
                PredictedCall(
                    "all_gather",
                    "dp",
                    group,
                    size,
                    k,
                    "backward",
                    f"{unit.name} params again",
                    overlap=True,
                )
            )
        calls.append(
            PredictedCall(
                "reduce_scatter",
                "dp",
                group,
                size,
                k,
                "backward",
                f"{unit.name} grads",
                overlap=not unit.is_root,
            )
        )
    return calls


def dp_calls(job: Job, rank: int, step: int = 1) -> list[PredictedCall]:
    """The dp-group calls of ``rank`` in ``step`` (0 is the first, before DDP's rebuild)."""
    d = job.dims
    if d.dp == 1:
        return []
    group = tuple(d.group_of(rank, "dp"))
    if job.scheme in ("zero2", "zero3"):
        return fsdp_calls(job, rank, group, reshard=job.scheme == "zero3")
    if d.pp > 1:
        return grad_sync_calls(job, rank, group)
    calls = ddp_calls(job, rank, group, rebuilt=step > 0, syncs=1)
    if step == 0:
        # DDP's constructor broadcasts every parameter from dp rank 0 (one coalesced call)
        total = sum(math.prod(shape) for _, shape in rank_params(job, rank)) * job.dtype_bytes
        calls.append(
            PredictedCall("broadcast", "dp", group, total, 1, "other", "DDP start-up sync")
        )
    if job.scheme == "zero1":
        calls += zero1_broadcasts(job, rank, group)
    return calls
