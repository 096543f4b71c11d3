"""Collective micro-benchmarks with nccl-tests semantics, and alpha-beta profile fits.

``run_bench(BenchConfig(...))`` starts the ranks (on loopback, or on an
emulated cluster with ``nodes``/``link``), returns one row per op and size
(latency stats, algbw, busbw, correctness); :mod:`commlens.bench.fit` turns
rows into a network profile for :mod:`commlens.model`.
"""

from __future__ import annotations

from commlens.bench.runner import BenchConfig, BenchReport, run_bench

__all__ = ["BenchConfig", "BenchReport", "run_bench"]
