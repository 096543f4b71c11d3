"""Turn a model into one rank's part of a parallel job: one ``apply_*`` per scheme.

``parallelize`` composes them in a fixed order (as torchtitan does):

1. ``build_shard`` — tensor and pipeline parallelism are structural: the rank
   builds only its pipeline stage, with Megatron column/row-parallel layers
   split over its tp group, and initializes it as slices of the full model.
2. ``apply_recompute`` — activation recomputation per layer.
3. data parallelism, by scheme:

   - ``apply_ddp`` (dp, tp, and 3d without stages): DDP's bucketed gradient
     all-reduce during backward, over the dp group.
   - ``apply_grad_sync`` (pp and 3d with stages): after the whole pipeline's
     backward, the same bucketed all-reduce issued explicitly (Megatron's own
     DDP without overlap), since DDP cannot follow a pipeline schedule.
   - ``apply_zero1``: DDP plus ``ZeroRedundancyOptimizer``. Issues the full
     gradient all-reduce (not a reduce-scatter) and, in the optimizer step,
     one broadcast per parameter from the rank that owns it: 2·ψ bytes.
   - ``apply_fsdp`` (zero2: ``fully_shard(reshard_after_forward=False)``,
     zero3: ``reshard_after_forward=True``): per layer an all-gather of the
     parameters before forward (zero3: again before backward) and a
     reduce-scatter of the gradients after backward of every micro-batch.
     On gloo the reduce-scatter is emulated with an all-reduce inside torch's
     gloo backend; the trace still shows reduce_scatter.

After backward, ``finish_grads`` sums what is still partial: the gradients
of replicated norms under sequence parallelism (tp all-reduce) and the tied
word embedding of the first and last pipeline stage (embedding all-reduce).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from commlens.job.spec import Job
from commlens.workloads.groups import Groups
from commlens.workloads.init import init_parameters
from commlens.workloads.layers import Block
from commlens.workloads.models import build_model
from commlens.workloads.tp import TPContext

BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's default bucket


@dataclass
class GradSync:
    """Explicit data-parallel gradient all-reduce in buckets, after backward."""

    params: list[nn.Parameter]
    group: dist.ProcessGroup
    size: int
    bucket_bytes: int = BUCKET_BYTES

    def __call__(self) -> None:
        bucket: list[torch.Tensor] = []
        filled = 0
        for p in reversed(self.params):  # last layers first, as DDP orders its buckets
            if p.grad is None:
                continue
            bucket.append(p.grad)
            filled += p.grad.numel() * p.grad.element_size()
            if filled >= self.bucket_bytes:
                self._reduce(bucket)
                bucket, filled = [], 0
        if bucket:
            self._reduce(bucket)

    def _reduce(self, grads: list[torch.Tensor]) -> None:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)  # dp: sum of every replica's gradients
        flat.div_(self.size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


@dataclass
class Parallelized:
    """One rank's model, optimizer and the communication around them."""

    model: nn.Module
    """What forward is called on (the stage, possibly DDP/FSDP-wrapped)."""
    stage: nn.Module
    """The unwrapped stage model."""
    optimizer: torch.optim.Optimizer
    groups: Groups
    tp: TPContext
    grad_sync: GradSync | None = None
    seq_parallel_params: list[nn.Parameter] = field(default_factory=list)

    def no_sync(self, last_microbatch: bool) -> contextlib.AbstractContextManager[None]:
        """DDP: skip the gradient all-reduce on all but the last micro-batch."""
        if isinstance(self.model, DDP) and not last_microbatch:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def finish_grads(self) -> None:
        """Complete the gradients after the last backward (Megatron's finalize_model_grads)."""
        if self.grad_sync is not None:
            self.grad_sync()
        if self.tp.sequence_parallel and self.seq_parallel_params:
            # SP: norms saw only this rank's part of the sequence; sum over tp
            grads = [p.grad for p in self.seq_parallel_params if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.tp.group)
            for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
                g.copy_(part.view_as(g))
        if self.groups.embedding is not None:
            # pp: first and last stage each hold the tied word embedding; sum their gradients
            word = self.stage.word_embedding()  # type: ignore[operator]
            if word.grad is not None:
                dist.all_reduce(word.grad, group=self.groups.embedding)


def build_shard(job: Job, groups: Groups, device: torch.device) -> tuple[nn.Module, TPContext]:
    """Tensor + pipeline parallelism: this rank's stage, split over tp, initialized."""
    tp = groups.tp_context(job.sequence_parallel)
    with torch.device(device):  # allocate the shard where it trains, never the full model
        model = build_model(job.model, tp, groups.dims.pp, groups.stage)
    init_parameters(model, job.model, tp, job.run.seed)
    dtype = torch.bfloat16 if job.dtype == "bf16" else torch.float32
    return model.to(dtype=dtype), tp


def apply_recompute(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, Block):
            module.recompute = True


def apply_ddp(model: nn.Module, groups: Groups) -> nn.Module:
    # the gradient all-reduce runs in DDP's buckets, overlapped with backward
    return DDP(model, process_group=groups.dp, bucket_cap_mb=25)


def apply_grad_sync(model: nn.Module, groups: Groups) -> GradSync:
    assert groups.dp is not None
    return GradSync(list(model.parameters()), groups.dp, groups.dims.dp)


def apply_zero1(model: nn.Module, lr: float, groups: Groups) -> torch.optim.Optimizer:
    # AdamW state sharded over dp; after each local step the owner broadcasts its parameters
    return ZeroRedundancyOptimizer(
        model.parameters(), optimizer_class=torch.optim.AdamW, process_group=groups.dp, lr=lr
    )


def apply_fsdp(model: nn.Module, groups: Groups, reshard_after_forward: bool) -> nn.Module:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    assert groups.dp is not None
    device_type = "cuda" if next(model.parameters()).is_cuda else "cpu"
    if groups.dims.dp == groups.dims.world_size:  # a 1-D mesh over every rank
        mesh = init_device_mesh(device_type, (groups.dims.dp,), mesh_dim_names=("dp",))
    else:
        mesh = DeviceMesh.from_group(groups.dp, device_type, mesh_dim_names=("dp",))
    # one parameter group per layer: all-gather before it runs, reduce-scatter after its backward
    for module in model.modules():
        if isinstance(module, Block):
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def parallelize(job: Job, groups: Groups, device: torch.device) -> Parallelized:
    """Build this rank's part of ``job`` with its scheme applied."""
    stage, tp = build_shard(job, groups, device)
    if job.recompute:
        apply_recompute(stage)
    seq_params = [p for p in stage.parameters() if getattr(p, "sequence_parallel", False)]
    model: nn.Module = stage
    grad_sync = None
    data_parallel = groups.dims.dp > 1
    if job.scheme in ("zero2", "zero3") and data_parallel:
        model = apply_fsdp(stage, groups, reshard_after_forward=job.scheme == "zero3")
    elif data_parallel and groups.dims.pp == 1:
        model = apply_ddp(stage, groups)
    elif data_parallel:
        grad_sync = apply_grad_sync(stage, groups)
    optimizer: torch.optim.Optimizer
    if job.scheme == "zero1" and data_parallel:
        optimizer = apply_zero1(stage, job.run.lr, groups)
    else:
        optimizer = torch.optim.AdamW(stage.parameters(), lr=job.run.lr)
    return Parallelized(model, stage, optimizer, groups, tp, grad_sync, seq_params)
