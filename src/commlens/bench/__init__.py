"""Collective micro-benchmarks with nccl-tests semantics, and alpha-beta profile fits.

``run_bench(BenchConfig(...))`` starts the ranks (on loopback, or on an
emulated cluster with ``nodes``/``link``), returns one row per op and size
(latency stats, algbw, busbw, correctness); :mod:`commlens.bench.fit` turns
rows into a network profile for :mod:`commlens.predict`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commlens.bench.runner import BenchConfig, BenchReport, run_bench

__all__ = ["BenchConfig", "BenchReport", "run_bench"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the runner imports torch.
    if name in __all__:
        from commlens.bench import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'commlens.bench' has no attribute {name!r}")
