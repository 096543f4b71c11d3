"""The sections of a sweep's report: which tables and plots, with which columns.

Each builder returns a :class:`~commlens.report.document.Section` only when
the grid answers its question (several links, several sequence lengths, ZeRO
beside DP, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.report import sweep_plots as figures
from commlens.report.document import Column, Section
from commlens.sweep import findings
from commlens.sweep.spread import (
    Spread,
    link_comparisons,
    link_findings,
    link_gains,
    point_spreads,
)


def _section(
    key: str,
    title: str,
    table: pa.Table,
    cols: list[tuple[str, str, str]],
    note: str = "",
    plot: tuple[str, Callable[[pa.Table], Any]] | None = None,
) -> Section:
    columns = [Column(k, t, f) for k, t, f in cols if k in table.column_names and _filled(table, k)]
    plots = [(plot[0], lambda: plot[1](table))] if plot else []
    return Section(key, title, table, columns, note, plots)


def _filled(table: pa.Table, key: str) -> bool:
    """Whether the column ``key`` holds anything (a column empty in every row is not shown)."""
    return any(v not in (None, "") for v in table.column(key).to_pylist())


def _spreads(speed: pa.Table, sweep: Path | None) -> dict[str, Spread]:
    rows = speed.to_pylist()
    ids = [r[k] for r in rows for k in ("slowest_id", "fastest_id")]
    return point_spreads(sweep, ids) if sweep is not None else {}


def _link_note(speed: pa.Table, sweep: Path | None) -> str:
    """What the speedups show, worded from them (Study A expects DP to gain the most)."""
    return "\n".join(link_findings(speed.to_pylist(), _spreads(speed, sweep)))


def link_headline(con: Any, sweep: Path | None) -> tuple[list[str], tuple[str, Any] | None]:
    """The sweep's answer: how the schemes' speedups from the slowest link to the fastest
    compare (a sentence per model), and the chart of each speedup with its noise band;
    ([], None) for a sweep of one link."""
    speed = findings.link_speedup(con)
    if not speed.num_rows:
        return [], None
    spreads = _spreads(speed, sweep)
    rows = speed.to_pylist()
    lines = link_comparisons(rows, spreads) or link_findings(rows, spreads)
    bands = {
        (row["model"], row["scheme"]): (gain.low, gain.high)
        for row, gain in link_gains(rows, spreads)
        if gain.low is not None and gain.high is not None
    }
    return lines, ("speedup per interconnect", lambda: figures.speedup(speed, bands))


POINT_COLUMNS = [
    ("model", "model", "str"),
    ("scheme", "scheme", "str"),
    ("layout", "dp×tp×pp", "str"),
    ("seq_len", "seq len", "int"),
    ("micro_batch", "micro-batch", "int"),
    ("network", "network", "str"),
    ("status", "status", "str"),
    ("step_s", "median step (s)", "s"),
    ("step_min_s", "best step (s)", "s"),
    ("comm_share", "comm (% of step)", "pct"),
    ("tokens_per_s", "tokens/s", "rate"),
    ("peak_link_gbit_s", "link peak (Gbit/s)", "gbit"),
    ("validated", "validate", "str"),
    ("error", "error / reason", "str"),
]

SPEEDUP_COLUMNS = [
    ("model", "model", "str"),
    ("scheme", "scheme", "str"),
    ("layout", "dp×tp×pp", "str"),
    ("slowest_link", "slowest link", "str"),
    ("slowest_step_s", "step there (s)", "s"),
    ("fastest_link", "fastest link", "str"),
    ("fastest_step_s", "step there (s)", "s"),
    ("speedup", "speedup", "x"),
]

SHARE_COLUMNS = [
    ("model", "model", "str"),
    ("scheme", "scheme", "str"),
    ("link", "link", "str"),
    ("step_s", "step (s)", "s"),
    ("comm_share", "comm (% of step)", "pct"),
    ("allreduce_share", "dp/tp all-reduce (%)", "pct"),
    ("allreduce_transfer_share", "of it in transfer (%)", "pct"),
    ("pp_recv_share", "pipeline recv (%)", "pct"),
    ("embedding_allreduce_share", "embedding all-reduce (%)", "pct"),
]

UTILIZATION_COLUMNS = [
    ("link", "link", "str"),
    ("points", "points", "int"),
    ("peak_gbit_s", "peak (Gbit/s)", "gbit"),
    ("mean_peak_gbit_s", "mean of peaks (Gbit/s)", "gbit"),
    ("peak_scheme", "peak in scheme", "str"),
]

SCALE_COLUMNS = [
    ("point_model", "measured model", "str"),
    ("point_scheme", "scheme", "str"),
    ("model", "predicted model", "str"),
    ("layout", "dp×tp×pp", "str"),
    ("network", "network", "str"),
    ("step_s", "step (s)", "s"),
    ("comm_share", "comm (% of step)", "pct"),
    ("speedup", "speedup", "x"),
    ("measured_speedup", "measured here", "x"),
]


def sweep_sections(con: Any, sweep: Path | None = None) -> list[Section]:
    """The report's sections; ``sweep`` (the directory) lets the link finding weigh
    each speedup against the spread of the points' steps."""
    out = [_section("points", "Points", findings.points_table(con), POINT_COLUMNS)]
    speed = findings.link_speedup(con)
    if speed.num_rows:
        out.append(
            _section(
                "link_speedup",
                "Speedup from the slowest to the fastest link (Study A)",
                speed,
                SPEEDUP_COLUMNS,
                _link_note(speed, sweep),
            )
        )
        out.append(
            _section(
                "shares",
                "Where the step goes per link (Study A)",
                findings.shares_by_link(con),
                SHARE_COLUMNS,
                "Shares are time inside the calls over the mean step, mean over the ranks "
                "that issue them. A collective's time is waiting for the last rank to arrive "
                "(compute skew, other work on the machine) plus transfer once all are there; "
                "a pipeline receive includes waiting for the other stage.",
                ("shares per link", figures.shares),
            )
        )
    util = findings.link_utilization(con)
    if util.num_rows:
        out.append(
            _section(
                "utilization",
                "Peak link utilization per rate (NIC counters)",
                util,
                UTILIZATION_COLUMNS,
                plot=("peak link utilization", figures.utilization),
            )
        )
    scale = findings.scale_predictions(con)
    if scale.num_rows:
        out.append(
            _section(
                "scale",
                "The model at the studies' scale",
                scale,
                SCALE_COLUMNS,
                "Predicted with `commlens predict` (bf16, 100 TFLOP/s per GPU) beside the "
                "speedup measured in this sweep from its slowest to its fastest link.",
                ("predicted speedup", figures.predicted),
            )
        )
    out += volume_sections(con)
    return out


def volume_sections(con: Any) -> list[Section]:
    out = []
    vol = findings.volume_by_op(con)
    if vol.num_rows:
        out.append(
            _section(
                "volume",
                "Volume per op and role (per rank per step, busiest rank)",
                vol,
                [
                    ("model", "model", "str"),
                    ("scheme", "scheme", "str"),
                    ("seq_len", "seq len", "int"),
                    ("network", "network", "str"),
                    ("op", "op", "str"),
                    ("role", "role", "name"),
                    ("calls_per_rank_step", "calls", "float"),
                    ("bytes_per_rank_step", "S (bytes)", "bytes"),
                    ("wire_bytes_per_rank_step", "wire, ring (bytes)", "bytes"),
                    ("share_of_step", "time (% of step)", "pct"),
                ],
                plot=("volume per op and role", figures.volume_ops),
            )
        )
    ratio = findings.zero_ratio(con)
    if ratio.num_rows:
        out.append(
            _section(
                "zero_ratio",
                "ZeRO volume relative to DP (Study B: ZeRO-3 ≈ 1.5×)",
                ratio,
                [
                    ("model", "model", "str"),
                    ("scheme", "scheme", "str"),
                    ("seq_len", "seq len", "int"),
                    ("wire_bytes", "wire (bytes)", "bytes"),
                    ("dp_wire_bytes", "DP wire (bytes)", "bytes"),
                    ("ratio_to_dp", "ratio to DP", "x"),
                ],
                "Wire bytes per rank per step, ring convention. ZeRO-3 adds a parameter "
                "all-gather in forward and again in backward: 1.5× DP. ZeRO-1 here is PyTorch's "
                "ZeroRedundancyOptimizer: DDP's all-reduce plus a broadcast of every parameter, "
                "2× DP; ZeRO-2 (fully_shard keeping the parameters after forward: one "
                "all-gather and a reduce-scatter) matches DP.",
                plot=("ratio to DP", figures.ratio),
            )
        )
    seq = findings.volume_vs_seq(con)
    if seq.num_rows:
        out.append(
            _section(
                "volume_seq",
                "Volume vs sequence length (Study B)",
                seq,
                [
                    ("model", "model", "str"),
                    ("scheme", "scheme", "str"),
                    ("seq_len", "seq len", "int"),
                    ("wire_bytes", "wire (bytes)", "bytes"),
                    ("relative_seq_len", "seq len / shortest", "float"),
                    ("relative_volume", "volume / shortest's", "float"),
                ],
                "DP and ZeRO move the gradients and parameters whatever the sequence; "
                "TP and PP move activations, linear in the sequence length.",
                ("volume vs sequence length", figures.volume_seq),
            )
        )
    hist = findings.size_histogram(con)
    if hist.num_rows:
        out.append(
            _section(
                "sizes",
                "Message sizes per scheme (log2 buckets, measured steps, all ranks)",
                hist,
                [
                    ("scheme", "scheme", "str"),
                    ("op", "op", "str"),
                    ("size_bucket_bytes", "size ≥", "size"),
                    ("count", "calls", "int"),
                    ("bytes", "bytes", "bytes"),
                ],
                plot=("message sizes", figures.sizes),
            )
        )
    val = findings.validation_table(con)
    if val.num_rows:
        out.append(
            _section(
                "validation",
                "Each point held against the analytical model",
                val,
                [
                    ("id", "point", "str"),
                    ("verdict", "verdict", "str"),
                    ("validate_summary", "detail", "str"),
                ],
            )
        )
    return out
