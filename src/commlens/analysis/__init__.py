"""Analyses: pure functions from a run to Arrow tables (no printing, no plotting).

Open a run with :func:`open_run` (a directory, scanned lazily by DuckDB, or a
loaded :class:`commlens.Run`), then call the table functions.
"""

from commlens.analysis.bandwidth import algbw_GBps, bus_factor, busbw_GBps, wire_factor
from commlens.analysis.breakdown import module_table, op_phase_table, phase_table
from commlens.analysis.compare import compare_ops, compare_summary
from commlens.analysis.ops import op_size_table, op_table, size_histogram
from commlens.analysis.skew import matched_events, skew_by_step, skew_table, straggler_table
from commlens.analysis.source import RunView, open_run
from commlens.analysis.steps import rank_summary, step_summary, step_table
from commlens.analysis.throughput import throughput_summary, throughput_table
from commlens.analysis.utilization import event_utilization, nic_utilization, utilization_summary

__all__ = [
    "RunView",
    "algbw_GBps",
    "bus_factor",
    "busbw_GBps",
    "compare_ops",
    "compare_summary",
    "event_utilization",
    "matched_events",
    "module_table",
    "nic_utilization",
    "op_phase_table",
    "op_size_table",
    "op_table",
    "open_run",
    "phase_table",
    "rank_summary",
    "size_histogram",
    "skew_by_step",
    "skew_table",
    "step_summary",
    "step_table",
    "straggler_table",
    "throughput_summary",
    "throughput_table",
    "utilization_summary",
    "wire_factor",
]
