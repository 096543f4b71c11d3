"""Analyses: pure functions from tables to Arrow tables (no printing, no plotting).

A run is opened by the trace reader (:func:`commlens.trace.open_run`, re-exported
here); one pass over its events (:func:`rank_pass`) gives a plain value,
:class:`RankPass`, and each table function is a function of it:

    with open_run("runs/x") as view:
        rp = rank_pass(view, match=True)
    op_table(rp), step_table(rp), skew_table(rp)

A table function also takes a view, a loaded :class:`commlens.Run` or a run
directory, and then makes the pass it needs itself.
"""

from commlens.analysis.bandwidth import algbw_GBps, bus_factor, busbw_GBps, wire_factor
from commlens.analysis.breakdown import module_table, op_phase_table, phase_table
from commlens.analysis.compare import compare_ops, compare_summary
from commlens.analysis.ops import op_size_table, op_table, size_histogram
from commlens.analysis.rankpass import RankPass, rank_pass
from commlens.analysis.skew import matched_events, skew_by_step, skew_table, straggler_table
from commlens.analysis.steps import rank_summary, step_summary, step_table
from commlens.analysis.throughput import throughput_summary, throughput_table
from commlens.analysis.utilization import event_utilization, nic_utilization, utilization_summary
from commlens.trace.reader import RunView, open_run

__all__ = [
    "RankPass",
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
    "rank_pass",
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
