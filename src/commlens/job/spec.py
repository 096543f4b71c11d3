"""One training job: the model, how it is split, the shapes of a step, how it runs.

A :class:`Job` is what ``commlens run`` trains, what ``commlens predict``
models and what a run's manifest keeps (its ``workload`` section, written by
:meth:`Job.to_dict` and read back by :meth:`Job.from_dict`), so a run and its
prediction describe the same job. What only a real run has (steps, seed,
learning rate, backend) sits apart in :class:`RunSettings`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from commlens.errors import RunFormatError, UsageError
from commlens.job.models import ModelConfig, check_layout, flops_per_step, get_preset
from commlens.job.parallel import DATA_PARALLEL, SCHEMES, ParallelDims
from commlens.numbers import number_problem

DTYPE_BYTES = {"fp32": 4, "bf16": 2}
"""Training dtypes and their bytes per element (parameters, gradients, activations)."""
SCHEDULES = ("1f1b", "gpipe")
"""Pipeline schedules."""
SHAPES = ("seq_len", "micro_batch", "microbatches")
"""The positive integer shapes of a step."""


MAX_STEPS = (1 << 31) - 1
"""The most steps a run may take: a step number is an int32 in the run format."""


@dataclass(frozen=True)
class RunSettings:
    """What a real run adds to a job: its loop and its process group."""

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
        if not 1 <= self.steps <= MAX_STEPS:
            raise UsageError(f"--steps must be in 1..{MAX_STEPS:,}, got {self.steps}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"--lr must be a positive finite number, got {self.lr}")
        if not 0 <= self.seed < 1 << 63:
            raise UsageError(f"--seed must be in 0..2^63-1, got {self.seed}")
        if not 0 <= self.warmup_steps < self.steps:
            raise UsageError(
                f"--warmup-steps must be between 0 and --steps − 1 ({self.steps - 1}), "
                f"got {self.warmup_steps}"
            )


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
    """Sequences per micro-batch b, per data-parallel rank."""
    microbatches: int = 1
    """Micro-batches per step k (pipeline micro-batches or gradient accumulation)."""
    dtype: str = "fp32"
    """Training dtype of parameters, gradients, optimizer state and activations."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (all-gather + reduce-scatter instead of all-reduce)."""
    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b or gpipe."""
    recompute: bool = False
    """Activation recomputation of every layer (changes FLOPs and memory)."""
    run: RunSettings = field(default_factory=RunSettings)
    """Steps, seed, learning rate and backend of a real run."""

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise UsageError(f"unknown scheme {self.scheme!r}; choose one of {', '.join(SCHEMES)}")
        if self.dtype not in DTYPE_BYTES:
            raise UsageError(
                f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPE_BYTES)}"
            )
        if self.schedule not in SCHEDULES:
            raise UsageError(
                f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}"
            )
        for name in SHAPES:
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be a positive integer, got {getattr(self, name)}")
        d = self.dims
        if self.scheme in DATA_PARALLEL and (d.tp > 1 or d.pp > 1):
            raise UsageError(
                f"scheme {self.scheme} is pure data parallelism (got tp={d.tp} pp={d.pp}); use 3d"
            )
        if self.scheme == "tp" and d.pp > 1:
            raise UsageError(f"scheme tp has no pipeline stages (got pp={d.pp}); use 3d")
        if self.scheme == "pp" and d.tp > 1:
            raise UsageError(f"scheme pp has no tensor parallelism (got tp={d.tp}); use 3d")
        if self.sequence_parallel and d.tp == 1:
            raise UsageError("sequence parallelism needs tensor parallelism (tp > 1)")
        check_layout(self.model, d.tp, d.pp, self.seq_len, self.sequence_parallel)

    @property
    def dtype_bytes(self) -> int:
        """β (and βa): bytes per parameter, gradient and activation element."""
        return DTYPE_BYTES[self.dtype]

    @property
    def loss_rank(self) -> int:
        """The rank whose loss ``commlens run`` quotes, line by line and in its summary:
        dp 0, tp 0 of the last pipeline stage (a rank that computes the loss)."""
        return self.dims.rank_of(0, 0, self.dims.pp - 1)

    @property
    def flops_per_rank(self) -> float:
        """Model FLOPs of one step on one rank (conventions §2): the job's over its ranks."""
        flops = flops_per_step(
            self.model, self.seq_len, self.micro_batch, self.microbatches, self.recompute
        )
        return flops * self.dims.dp / self.dims.world_size

    @property
    def global_batch(self) -> int:
        """Sequences per step over all data-parallel ranks."""
        return self.dims.dp * self.microbatches * self.micro_batch

    def describe(self) -> dict[str, Any]:
        """The job in one flat record (model by name, layout and shapes), as the
        predict and validate outputs show it."""
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

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``workload`` section: JSON-able, flat, read by :meth:`from_dict`."""
        out: dict[str, Any] = {"model": self.model.to_dict(), "preset": self.model.name}
        out["scheme"] = self.scheme
        out["dims"] = self.dims.as_dict()
        out.update({name: getattr(self, name) for name in _JOB_FIELDS})
        out.update(dataclasses.asdict(self.run))
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Job:
        """The job a manifest's ``workload`` section describes.

        ``model`` is the model's shape (or a preset name), ``dims`` the layout;
        every other key is a field of :class:`Job` or :class:`RunSettings`, and
        one left out takes its default. A key of another name or a value of
        another type is a :class:`RunFormatError` naming it.
        """
        if not isinstance(data, dict):
            raise RunFormatError(f"the workload must be a table, got {data!r}")
        known = {"model", "preset", "scheme", "dims", *_JOB_FIELDS, *_RUN_FIELDS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RunFormatError(f"unknown key {unknown[0]!r} in the workload")
        for key in ("model", "scheme", "dims"):
            if key not in data:
                raise RunFormatError(f"the workload has no {key}")
        raw = data["model"]
        if isinstance(raw, str):
            model = get_preset(raw)
        else:
            model = ModelConfig(**_typed(ModelConfig, raw, "model"))
        fields = _typed(cls, {k: data[k] for k in ("scheme", *_JOB_FIELDS) if k in data}, "")
        return cls(
            model=model,
            dims=ParallelDims(**_typed(ParallelDims, data["dims"], "dims")),
            run=RunSettings(**_typed(RunSettings, {k: data[k] for k in _RUN_FIELDS if k in data})),
            **fields,
        )


_JOB_FIELDS = (*SHAPES, "dtype", "sequence_parallel", "schedule", "recompute")
"""The fields of :class:`Job` that are plain values (not the model, scheme or layout)."""
_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunSettings))
_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _typed(kind: type, data: Any, where: str = "") -> dict[str, Any]:
    """``data`` as keyword arguments of the dataclass ``kind``: every key one of its
    plain fields, every value of that field's type (an int also serves a float)."""
    prefix = f"{where}." if where else ""
    if not isinstance(data, dict):
        raise RunFormatError(f"{where or 'the workload'} must be a table, got {data!r}")
    types = {f.name: _KINDS.get(str(f.type)) for f in dataclasses.fields(kind)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        want = types.get(key)
        if want is None:
            raise RunFormatError(f"unknown key {prefix + key!r} in the workload")
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            raise RunFormatError(f"{prefix}{key} must be {_NAMES[want]}, got {value!r}")
        problem = number_problem(value) if isinstance(value, float) else ""
        if problem:
            raise RunFormatError(f"{prefix}{key} {problem}")
        out[key] = value
    return out
