"""Sweeps: a grid of `commlens run` points, resumable, with a DuckDB catalog and a report.

``commlens sweep FILE.toml`` (:func:`run_sweep`), ``commlens report SWEEP_DIR``
(:func:`commlens.report.sweep.render_sweep`), ``commlens demo``.
"""

from __future__ import annotations

from commlens.sweep.catalog import is_sweep_dir, open_catalog
from commlens.sweep.grid import Point, expand
from commlens.sweep.runner import SweepOutcome, run_sweep
from commlens.sweep.spec import SweepSpec, load_spec, parse_spec

__all__ = [
    "Point",
    "SweepOutcome",
    "SweepSpec",
    "expand",
    "is_sweep_dir",
    "load_spec",
    "open_catalog",
    "parse_spec",
    "run_sweep",
]
