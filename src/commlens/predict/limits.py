"""The largest job the analytical model takes, so every prediction stays quick.

The model walks the groups of one rank per pipeline stage, so its time grows
with the world size (about 1.5 s for 100,000 ranks on one core) and with the
layers per stage; past these bounds a prediction would run for minutes. The
bounds sit well above any job built today (the largest clusters hold ~100k
GPUs; the largest dense models ~130 layers, hidden 25k, 256k vocabularies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commlens.errors import UsageError

if TYPE_CHECKING:
    from commlens.job.spec import Job


@dataclass(frozen=True)
class Bound:
    """The allowed range of one scale argument, and the flag that sets it."""

    flag: str
    high: float
    low: float = 1


LIMITS: dict[str, Bound] = {
    "dp": Bound("--dp", 1 << 17),
    "tp": Bound("--tp", 1 << 12),
    "pp": Bound("--pp", 1 << 12),
    "world_size": Bound("dp·tp·pp", 1 << 17),
    "layers": Bound("--layers", 1 << 12),
    "decoder_layers": Bound("decoder layers", 1 << 12),
    "hidden": Bound("--hidden", 1 << 18),
    "heads": Bound("--heads", 1 << 14),
    "ffn_hidden": Bound("--ffn-hidden", 1 << 20),
    "vocab": Bound("--vocab", 1 << 24),
    "max_positions": Bound("--max-positions", 1 << 24),
    "seq_len": Bound("--seq-len", 1 << 24),
    "micro_batch": Bound("--micro-batch", 1 << 20),
    "microbatches": Bound("--microbatches", 1 << 20),
    "gpus_per_node": Bound("--gpus-per-node", 1 << 12),
    "nics_per_node": Bound("--nics-per-node", 1 << 12),
    "tflops": Bound("--tflops", 1e6, low=1e-6),
}
"""Inclusive bounds by field name (``Job``, ``ModelConfig`` and ``predict`` arguments)."""


def check_scale(name: str, value: float) -> None:
    """A one-line :class:`UsageError` when ``value`` is outside ``LIMITS[name]``."""
    bound = LIMITS[name]
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{bound.flag} must be a finite number, got {value}")
    if value < bound.low:
        raise UsageError(f"{bound.flag} must be at least {_fmt(bound.low)}, got {_fmt(value)}")
    if value > bound.high:
        raise UsageError(
            f"{bound.flag} = {_fmt(value)} is above the model's limit of {_fmt(bound.high)} "
            "(a prediction must stay quick)"
        )


def _fmt(value: float) -> str:
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


def check_scales(values: dict[str, float]) -> None:
    """:func:`check_scale` for every item."""
    for name, value in values.items():
        check_scale(name, value)


def check_job(
    job: Job, gpus_per_node: int = 1, nics_per_node: int = 1, tflops: float = 1.0
) -> None:
    """Refuse a job (and fabric) beyond :data:`LIMITS` before any modelling starts."""
    d, m = job.dims, job.model
    check_scales(
        {
            "dp": d.dp,
            "tp": d.tp,
            "pp": d.pp,
            "world_size": d.world_size,
            "layers": m.layers,
            "hidden": m.hidden,
            "heads": m.heads,
            "ffn_hidden": m.ffn_hidden,
            "vocab": m.vocab,
            "max_positions": m.max_positions,
            "seq_len": job.seq_len,
            "micro_batch": job.micro_batch,
            "microbatches": job.microbatches,
            "gpus_per_node": gpus_per_node,
            "nics_per_node": nics_per_node,
            "tflops": tflops,
        }
    )
    if m.decoder_layers:
        check_scale("decoder_layers", m.decoder_layers)
