"""Analyses: pure functions from a run to Arrow tables (no printing, no plotting).

Each table function takes a run directory, a loaded :class:`commlens.Run` or
a :class:`RunView`. To compute several tables of one run, open it once with
:func:`open_run` and pass the view: the events are then read once (one numpy
pass per rank, :mod:`commlens.analysis.rankpass`) and the results cached.

    view = open_run("runs/x")
    op_table(view), step_table(view), skew_table(view)
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
