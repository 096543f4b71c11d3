"""What the model predicts: one training job (model, scheme, layout, shapes).

A :class:`Job` is built from CLI flags (``commlens predict``) or from a
captured run's manifest (``commlens validate``), so both read the same fields
the workloads record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commlens.errors import UsageError
from commlens.job.models import SCHEMES, ModelConfig, check_layout, get_preset
from commlens.job.parallel import ParallelDims

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Job:
    """One training job: the model, how it is split, and the shapes of a step."""

    model: ModelConfig
    """The model shape (a preset or an explicit config)."""
    scheme: str
    """dp, zero1, zero2, zero3, tp, pp or 3d."""
    dims: ParallelDims
    """The layout (the same object the workloads build their groups from)."""
    seq_len: int = 1024
    """Tokens per sequence s (encoder and decoder each, for T5)."""
    micro_batch: int = 1
    """Sequences per micro-batch b."""
    microbatches: int = 1
    """Micro-batches per step k (pipeline micro-batches or gradient accumulation)."""
    dtype: str = "fp32"
    """Training dtype of parameters, gradients and activations."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (all-gather + reduce-scatter instead of all-reduce)."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b or gpipe."""
    recompute: bool = False
    """Activation recomputation (changes FLOPs)."""

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise UsageError(f"unknown scheme {self.scheme!r}; choose one of {', '.join(SCHEMES)}")
        if self.dtype not in DTYPE_BYTES:
            raise UsageError(f"unknown dtype {self.dtype!r}; choose fp32 or bf16")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"unknown schedule {self.schedule!r}; choose 1f1b or gpipe")
        for name in ("seq_len", "micro_batch", "microbatches"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be a positive integer, got {getattr(self, name)}")
        d = self.dims
        if self.scheme in ("dp", "zero1", "zero2", "zero3") and (d.tp > 1 or d.pp > 1):
            raise UsageError(
                f"scheme {self.scheme} takes no tp/pp (got tp={d.tp} pp={d.pp}); use 3d"
            )
        if self.scheme == "tp" and d.pp > 1:
            raise UsageError(f"scheme tp takes no pp (got pp={d.pp}); use 3d")
        if self.scheme == "pp" and d.tp > 1:
            raise UsageError(f"scheme pp takes no tp (got tp={d.tp}); use 3d")
        if self.sequence_parallel and d.tp == 1:
            raise UsageError("sequence parallel needs tp > 1")
        check_layout(self.model, d.tp, d.pp, self.seq_len, self.sequence_parallel)

    @property
    def dtype_bytes(self) -> int:
        """β (and βa): bytes per parameter, gradient and activation element."""
        return DTYPE_BYTES[self.dtype]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "scheme": self.scheme,
            **self.dims.as_dict(),
            "seq_len": self.seq_len,
            "micro_batch": self.micro_batch,
            "microbatches": self.microbatches,
            "dtype": self.dtype,
            "sequence_parallel": self.sequence_parallel,
            "schedule": self.schedule,
            "recompute": self.recompute,
        }


def _get(workload: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in workload and workload[key] is not None:
            return workload[key]
    return default


def job_from_workload(workload: dict[str, Any], world_size: int | None = None) -> Job:
    """A :class:`Job` from a run manifest's ``workload`` section."""
    if not isinstance(workload, dict) or not workload:
        raise UsageError(
            "the run's manifest has no workload section; was it made by `commlens run`?"
        )
    model_raw = _get(workload, "model", "model_config")
    preset = _get(workload, "preset", "model")
    if isinstance(model_raw, dict):
        fields = set(ModelConfig.__dataclass_fields__)
        model = ModelConfig(**{k: v for k, v in model_raw.items() if k in fields})
    elif isinstance(preset, str):
        model = get_preset(preset)
    else:
        raise UsageError("the run's workload names no model preset or shape")
    parallel = _get(workload, "dims", "parallel", default={})
    if not isinstance(parallel, dict):
        parallel = {}
    ws = _get(parallel, "world_size", default=_get(workload, "world_size", default=world_size))
    if ws is None:
        raise UsageError("the run's workload gives no world size")
    dims = ParallelDims(
        int(ws),
        dp=int(_get(parallel, "dp", default=_get(workload, "dp", default=-1))),
        tp=int(_get(parallel, "tp", default=_get(workload, "tp", default=1))),
        pp=int(_get(parallel, "pp", default=_get(workload, "pp", default=1))),
    )
    return Job(
        model=model,
        scheme=str(_get(workload, "scheme")),
        dims=dims,
        seq_len=int(_get(workload, "seq_len", default=1024)),
        micro_batch=int(_get(workload, "micro_batch", default=1)),
        microbatches=int(_get(workload, "microbatches", default=1)),
        dtype=str(_get(workload, "dtype", default="fp32")),
        sequence_parallel=bool(_get(workload, "sequence_parallel", default=False)),
        schedule=str(_get(workload, "schedule", default="1f1b")),
        recompute=bool(_get(workload, "recompute", default=False)),
    )
