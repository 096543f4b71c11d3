"""What one ``commlens run`` trains: model, scheme, layout and loop settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from commlens.errors import UsageError
from commlens.job.models import SCHEMES, ModelConfig, check_layout, get_preset
from commlens.job.parallel import ParallelDims

DTYPES = {"fp32": 4, "bf16": 2}
SCHEDULES = ("1f1b", "gpipe")


def _or_rest(degree: int | None) -> int:
    return -1 if degree is None else degree


def resolve_dims(
    scheme: str, nproc: int, dp: int | None = None, tp: int | None = None, pp: int | None = None
) -> ParallelDims:
    """The layout a scheme implies on ``nproc`` ranks, checking explicit degrees.

    dp and zero*: all ranks data-parallel. tp: all ranks tensor-parallel unless
    --tp/--dp say otherwise (dp × tp). pp: likewise with stages. 3d: --dp, --tp,
    --pp, one of them may be left out (it takes the rest).
    """
    if scheme not in SCHEMES:
        raise UsageError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    given = {"dp": dp, "tp": tp, "pp": pp}
    if scheme in ("dp", "zero1", "zero2", "zero3"):
        for role in ("tp", "pp"):
            if given[role] not in (None, 1):
                raise UsageError(
                    f"scheme {scheme} is pure data parallelism; use --scheme 3d for --{role}"
                )
        return ParallelDims(nproc, dp=_or_rest(dp), tp=1, pp=1)
    if scheme == "tp":
        if pp not in (None, 1):
            raise UsageError("scheme tp has no pipeline stages; use --scheme 3d for --pp")
        if tp is None:
            return ParallelDims(nproc, dp=1 if dp is None else dp, tp=-1, pp=1)
        return ParallelDims(nproc, dp=_or_rest(dp), tp=tp, pp=1)
    if scheme == "pp":
        if tp not in (None, 1):
            raise UsageError("scheme pp has no tensor parallelism; use --scheme 3d for --tp")
        if pp is None:
            return ParallelDims(nproc, dp=1 if dp is None else dp, tp=1, pp=-1)
        return ParallelDims(nproc, dp=_or_rest(dp), tp=1, pp=pp)
    missing = [role for role, value in given.items() if value is None]
    if len(missing) > 1:
        raise UsageError(
            "scheme 3d needs at least two of --dp, --tp, --pp (the third takes the rest)"
        )
    return ParallelDims(nproc, dp=_or_rest(dp), tp=_or_rest(tp), pp=_or_rest(pp))


@dataclass(frozen=True)
class WorkloadConfig:
    """One training job; JSON-able (it is what each rank receives and the manifest keeps)."""

    model: ModelConfig
    """The model shape (a preset or a custom one)."""
    scheme: str
    """dp, zero1, zero2, zero3, tp, pp or 3d."""
    dims: ParallelDims
    """The dp × tp × pp layout."""
    seq_len: int = 128
    """Tokens per sequence (encoder and decoder each, for T5)."""
    micro_batch: int = 2
    """Sequences per micro-batch per data-parallel rank."""
    microbatches: int = 1
    """Micro-batches per step: gradient accumulation, or the pipeline's micro-batches."""
    dtype: str = "fp32"
    """fp32 or bf16: parameters, gradients, optimizer state and activations alike."""
    recompute: bool = False
    """Activation recomputation of every layer."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b or gpipe."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism in the tensor-parallel regions."""
    steps: int = 5
    """Training steps, warm-up included."""
    warmup_steps: int = 1
    """First steps left out of the statistics."""
    seed: int = 1234
    """Seed of the data and the initialization."""
    lr: float = 1e-3
    """AdamW learning rate."""
    backend: str = "gloo"
    """torch.distributed backend (gloo or nccl)."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"--schedule must be one of {', '.join(SCHEDULES)}")
        for name in ("seq_len", "micro_batch", "microbatches", "steps"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if not 0 <= self.warmup_steps < self.steps:
            raise UsageError(
                f"--warmup-steps must be between 0 and --steps − 1 ({self.steps - 1}), "
                f"got {self.warmup_steps}"
            )
        if self.sequence_parallel and self.dims.tp == 1:
            raise UsageError("--sequence-parallel needs tensor parallelism (--tp > 1)")
        if self.scheme.startswith("zero") and (self.dims.tp > 1 or self.dims.pp > 1):
            raise UsageError(f"scheme {self.scheme} is pure data parallelism (tp = pp = 1)")
        check_layout(self.model, self.dims.tp, self.dims.pp, self.seq_len, self.sequence_parallel)

    @property
    def dtype_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def global_batch(self) -> int:
        """Sequences per step over all data-parallel ranks."""
        return self.dims.dp * self.microbatches * self.micro_batch

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["model"] = self.model.to_dict()
        out["dims"] = self.dims.as_dict()
        out["preset"] = self.model.name
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkloadConfig:
        data = dict(data)
        data.pop("preset", None)
        model = data.pop("model")
        data["model"] = ModelConfig(**model) if isinstance(model, dict) else get_preset(model)
        data["dims"] = ParallelDims(**data.pop("dims"))
        return cls(**data)


def _backend(choice: str, nproc: int) -> str:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "nccl" and gpus < nproc:
        raise UsageError(f"--backend nccl needs a GPU per rank: {nproc} ranks, {gpus} GPUs")
    if choice == "auto":
        return "nccl" if gpus >= nproc else "gloo"
    return choice


def workload_from_options(args: Any) -> WorkloadConfig:
    """The workload that command-line style options describe (``commlens run``'s
    flags, or a sweep point); a UsageError for any bad combination."""
    model = get_preset(args.model)
    dims = resolve_dims(args.scheme, args.nproc, args.dp, args.tp, args.pp)
    return WorkloadConfig(
        model=model,
        scheme=args.scheme,
        dims=dims,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch,
        microbatches=args.microbatches,
        dtype=args.dtype,
        recompute=args.recompute,
        schedule=args.schedule,
        sequence_parallel=args.sequence_parallel,
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        seed=args.seed,
        lr=args.lr,
        backend=_backend(args.backend, args.nproc),
    )
