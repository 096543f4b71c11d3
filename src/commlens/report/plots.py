"""Plots of the analysis tables (matplotlib, Agg; no pyplot global state).

Each function takes tables and returns a ``Figure``; :func:`png` turns one
into PNG bytes (without the software URL matplotlib writes by default).
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

from commlens.units import format_bytes

_SIZE = (9.0, 4.5)
LEGEND = "medium"
"""The legends' font size (the figures are shown at about their size in inches × 100)."""


def log2_buckets(buckets: Iterable[int]) -> list[int]:
    """Every log2 bucket from the smallest to the largest of ``buckets`` (0, the bucket of
    empty messages, first when present): a histogram's x-axis shows the empty ones too."""
    present = sorted(set(int(b) for b in buckets))
    sizes = [b for b in present if b > 0]
    out = [0] if present and present[0] == 0 else []
    if sizes:
        low, high = sizes[0].bit_length() - 1, sizes[-1].bit_length() - 1
        out += [1 << k for k in range(low, high + 1)]
    return out


def activity_span(times: np.ndarray, pad: float = 0.05) -> tuple[float, float] | None:
    """The x-range of the activity at ``times``, with a margin of ``pad`` of its length."""
    if not len(times):
        return None
    low, high = float(np.min(times)), float(np.max(times))
    margin = (high - low) * pad or 0.5
    return low - margin, high + margin


def png(fig: Figure, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _empty(fig: Figure, title: str) -> Figure:
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def step_breakdown(steps: pa.Table, left_out: str = "", title: str = "") -> Figure:
    """Per step (mean over ranks): exposed comm, overlapped comm, other (compute);
    ``left_out`` says in a subtitle what rows were not drawn (set-up, warm-up)."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    title = title or "Time breakdown per step (mean over ranks)"
    if not steps.num_rows:
        return _empty(fig, title)
    ax = fig.add_subplot()
    x = np.asarray(steps.column("step").to_pylist())
    exposed = np.asarray(steps.column("exposed_s").to_pylist(), dtype=float)
    overlapped = np.asarray(steps.column("overlapped_s").to_pylist(), dtype=float)
    comm = exposed + overlapped
    other = np.maximum(np.asarray(steps.column("step_s").to_pylist(), dtype=float) - comm, 0)
    scale, unit = (1e3, "ms") if float(np.max(comm + other)) < 1.0 else (1.0, "s")
    ax.bar(x, exposed * scale, label="exposed comm", color="#d62728")
    ax.bar(x, overlapped * scale, bottom=exposed * scale, label="overlapped comm", color="#ff9896")
    ax.bar(x, other * scale, bottom=comm * scale, label="other (compute, idle)", color="#1f77b4")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="step", ylabel=f"time ({unit})")
    ax.set_title(title + (f"\n{left_out}" if left_out else ""), fontsize="medium")
    ax.legend(fontsize=LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def comm_share_by_op(ops: pa.Table, scope: str = "") -> Figure:
    """Share of the time inside communication calls, per op (over all groups)."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    title = "Share of communication time by op" + (f" ({scope})" if scope else "")
    totals: dict[str, float] = defaultdict(float)
    for op, t in zip(ops.column("op").to_pylist(), ops.column("time_s").to_pylist(), strict=True):
        totals[op] += float(t or 0.0)
    total = sum(totals.values())
    if not total:
        return _empty(fig, title)
    names = sorted(totals, key=lambda k: totals[k])
    ax = fig.add_subplot()
    ax.barh(names, [100 * totals[n] / total for n in names], color="#2ca02c")
    ax.set(title=title, xlabel="share of comm time (%)")
    return fig


def size_histogram(hist: pa.Table, scope: str = "") -> Figure:
    """Message sizes in log2 buckets, by count and by volume, stacked by op."""
    fig = Figure(figsize=(_SIZE[0] + 2, 5.0), layout="constrained")
    title = "Message sizes (log2 buckets)" + (f" ({scope})" if scope else "")
    if not hist.num_rows:
        return _empty(fig, title)
    buckets = log2_buckets(hist.column("size_bucket_bytes").to_pylist())
    pos = {b: i for i, b in enumerate(buckets)}
    ops = sorted(set(hist.column("op").to_pylist()))
    axes = fig.subplots(1, 2)
    for ax, col, label in ((axes[0], "count", "calls"), (axes[1], "bytes", "bytes")):
        bottom = np.zeros(len(buckets))
        for i, op in enumerate(ops):
            values = np.zeros(len(buckets))
            for o, b, v in zip(
                hist.column("op").to_pylist(),
                hist.column("size_bucket_bytes").to_pylist(),
                hist.column(col).to_pylist(),
                strict=True,
            ):
                if o == op:
                    values[pos[b]] += v
            ax.bar(
                range(len(buckets)),
                values,
                bottom=bottom,
                label=op,
                color=colormaps["tab20"](i % 20),
            )
            bottom += values
        ax.set_xticks(
            range(len(buckets)), [format_bytes(b) for b in buckets], rotation=60, fontsize="small"
        )
        ax.set(title=f"by {label}", ylabel=label, xlabel="message size S (bucket floor)")
        room = max(0, 3 - len(buckets)) / 2  # a bucket or two: bars of a bucket's width
        ax.set_xlim(-0.5 - room, len(buckets) - 0.5 + room)
    axes[1].yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
    axes[1].legend(fontsize=LEGEND)
    fig.suptitle(title)
    return fig


def busbw_vs_size(sizes: pa.Table, scope: str = "") -> Figure:
    """busbw (GB/s) against the message-size bucket, one line per op and group (two
    groups' points are never joined: a line is one group's calls)."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    title = "busbw vs message size (a line per op and group)" + (f"\n{scope}" if scope else "")
    rows = [r for r in sizes.to_pylist() if r["size_bucket_bytes"] > 0 and r["time_s"] > 0]
    if not rows:
        return _empty(fig, title)
    ax = fig.add_subplot()
    series: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        role = f", {r['role']}" if r.get("role") else ""
        series[f"{r['op']} [group {r['pg_name']}{role}]"][r["size_bucket_bytes"]] = r["busbw_GBps"]
    for label in sorted(series)[:12]:
        xs = sorted(series[label])
        ax.plot(xs, [series[label][x] for x in xs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
    ax.set_title(title + ("" if len(series) <= 12 else f"; 12 of {len(series)} shown"))
    ax.set(xlabel="message size S (log2 bucket)", ylabel="busbw (GB/s)")
    ax.legend(fontsize=LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def utilization(
    events: pa.Table,
    nic: pa.Table | None = None,
    inter: pa.Table | None = None,
    link_gbit: float | None = None,
    burst_bytes: int | None = None,
    max_lines: int = 8,
) -> Figure:
    """Gbit/s over the job's window. On several nodes: each node's transmit from its NIC
    counters (the link's measurement, solid), the part of the events' traffic that crosses
    nodes (ring convention, dashed) and the link's rate. On one node no link is crossed:
    each rank's event traffic, said to be loopback."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    has_nic = nic is not None and nic.num_rows > 0
    has_inter = inter is not None and inter.num_rows > 0
    title = (
        "Link utilization: inter-node traffic per node"
        if has_nic or has_inter
        else ("Traffic per rank from the events (one node: loopback, no link crossed)")
    )
    if not events.num_rows and not has_nic:
        return _empty(fig, title)
    ax = fig.add_subplot()
    colors = colormaps["tab10"]
    if has_nic or has_inter:
        for i, (table, col, style, what) in enumerate(
            (
                (nic, "tx_gbit_s", "-", "tx, NIC counters"),
                (inter, "gbit_s", "--", "to other nodes, events (ring)"),
            )
        ):
            if table is None or not table.num_rows:
                continue
            nodes = np.asarray(table.column("node").to_pylist())
            t = np.asarray(table.column("t_s").to_pylist(), dtype=float)
            g = np.asarray(table.column(col).to_pylist(), dtype=float)
            for n in np.unique(nodes)[:max_lines]:
                mask = nodes == n
                ax.plot(
                    t[mask],
                    g[mask],
                    style,
                    color=colors(int(n) % 10),
                    lw=2.0 if i == 0 else 1.0,
                    label=f"node {int(n)} {what}",
                    drawstyle="steps-pre" if i == 0 else "steps-post",
                )
        link_rate_line(ax, link_gbit)
        note = _over_rate_note(nic, link_gbit, burst_bytes) if has_nic else ""
        if link_gbit and has_inter and inter is not None:
            top = max(inter.column("gbit_s").to_pylist(), default=0.0)
            if top > link_gbit:
                note = "\n".join(
                    filter(
                        None,
                        [
                            note,
                            f"events' estimate peaks at {top:.3g} Gbit/s: a send "
                            "ends once its bytes are buffered, before they cross",
                        ],
                    )
                )
        if note:
            ax.text(0.01, 0.98, note, transform=ax.transAxes, va="top", fontsize="small")
    else:
        ranks = np.asarray(events.column("rank").to_pylist())
        t = np.asarray(events.column("t_s").to_pylist(), dtype=float)
        g = np.asarray(events.column("gbit_s").to_pylist(), dtype=float)
        for r in np.unique(ranks)[:max_lines]:
            mask = ranks == r
            ax.plot(t[mask], g[mask], label=f"rank {int(r)} (events, loopback)", linewidth=1)
    span = activity_span(_active_times(events, nic))
    if span is not None:  # NIC samples from before and after the job are left out
        ax.set_xlim(*span)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize="medium")
    ax.set(xlabel="time since first op (s)", ylabel="Gbit/s")
    ax.legend(fontsize=LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _over_rate_note(nic: pa.Table | None, link_gbit: float | None, burst: int | None) -> str:
    """A line on the figure when a NIC sample passes the link's rate, saying by how much
    and what the token bucket's burst allows over that sample."""
    if nic is None or not link_gbit or not nic.num_rows:
        return ""
    g = np.asarray(nic.column("tx_gbit_s").to_pylist(), dtype=float)
    i = int(np.argmax(g))
    if g[i] <= link_gbit:
        return ""
    dt = float(nic.column("interval_s")[i].as_py()) if "interval_s" in nic.column_names else 0.0
    allowed = link_gbit + (burst or 0) * 8 / dt / 1e9 if dt > 0 else link_gbit
    why = (
        f"within the token bucket's burst of {format_bytes(burst)} over that "
        f"{dt * 1e3:.0f} ms sample (≤ {allowed:.3g} Gbit/s)"
        if burst and g[i] <= allowed
        else "beyond what the shaping allows: a sampling error"
    )
    return f"peak {g[i]:.3g} Gbit/s is above the link rate: {why}"


def _active_times(events: pa.Table, nic: pa.Table | None) -> np.ndarray:
    """When there was traffic: the ops' times, else the NIC samples that moved bytes."""
    if events.num_rows:
        return np.asarray(events.column("t_s").to_pylist(), dtype=float)
    if nic is None or not nic.num_rows:
        return np.asarray([], dtype=float)
    t = np.asarray(nic.column("t_s").to_pylist(), dtype=float)
    g = np.asarray(nic.column("tx_gbit_s").to_pylist(), dtype=float)
    busy = t[g > 0.01 * float(np.max(g))] if np.max(g) > 0 else t
    return busy


def skew_vs_transfer(skew: pa.Table, scope: str = "") -> Figure:
    """Per op and group: time waiting for the last peer vs transfer after it."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    title = "Waiting for the last peer vs transfer" + (f" ({scope})" if scope else "")
    if not skew.num_rows:
        return _empty(fig, title)
    ax = fig.add_subplot()
    labels = [
        f"{o} [{g}]"
        for o, g in zip(
            skew.column("op").to_pylist(), skew.column("pg_name").to_pylist(), strict=True
        )
    ]
    wait = np.asarray(skew.column("wait_s").to_pylist(), dtype=float)
    transfer = np.maximum(np.asarray(skew.column("transfer_s").to_pylist(), dtype=float), 0)
    y = np.arange(len(labels))
    ax.barh(y, wait, label="waiting for last peer", color="#ff7f0e")
    ax.barh(y, transfer, left=wait, label="transfer", color="#1f77b4")
    ax.set_yticks(y, labels, fontsize="small")
    ax.set(title=title, xlabel="time summed over ranks (s)")
    ax.legend(fontsize=LEGEND)
    return fig


def grouped_bars(
    labels: list[str], series: dict[str, list[float]], title: str, ylabel: str
) -> Figure:
    """Bars of several runs side by side (used by compare)."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    if not labels or not series:
        return _empty(fig, title)
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    x = np.arange(len(labels))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + i * width, values, width, label=name)
    ax.set_xticks(x + width * (len(series) - 1) / 2, labels, rotation=30, fontsize="small")
    ax.set(title=title, ylabel=ylabel)
    ax.legend(fontsize=LEGEND)
    return fig


def link_rate_line(ax: Axes, link_gbit: float | None) -> None:
    """The link's rate as a labelled horizontal line (nothing for an unshaped link)."""
    if link_gbit:
        ax.axhline(
            link_gbit, color="black", ls="--", lw=1.2, label=f"link rate {link_gbit:g} Gbit/s"
        )


def bench_busbw(rows: list[dict[str, Any]], link_gbit: float | None = None) -> Figure:
    """busbw (Gbit/s) against the message size, a line per op, the link's rate drawn."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    title = "busbw vs message size"
    if not rows:
        return _empty(fig, title)
    ax = fig.add_subplot()
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = sorted((r for r in rows if r["op"] == op), key=lambda r: r["size_bytes"])
        xs = [max(int(r["size_bytes"]), 1) for r in mine]
        ax.plot(xs, [float(r["busbw_Gbit/s"]) for r in mine], marker="o", label=op)
    link_rate_line(ax, link_gbit)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
    ax.set(title=title, xlabel="message size", ylabel="busbw (Gbit/s)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=LEGEND)
    return fig


ROLE_COLORS = {"dp": "#1f77b4", "tp": "#d62728", "pp": "#2ca02c", "ep": "#9467bd", "cp": "#8c564b"}


_LANE_NAMES = {"rank": "rank", "node": "node", "ranks": "block of ranks"}


def timeline(lanes: Any) -> Figure:
    """Per lane (a rank, or a node or block of ranks), the comm ops of a few steps as bars
    coloured by their group's role over the steps' windows in grey: the white and grey
    between bars is computation. A lane of several ranks shows, per role, the share of
    its ranks inside a call over time (a band as tall as the lane: all of them)."""
    n = len(lanes.labels)
    fig = Figure(figsize=(_SIZE[0] + 2, max(2.2, 0.45 * n + 1.4)), layout="constrained")
    steps = lanes.steps
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}–{steps[-1]}"
    title = (
        f"Timeline of {span} (around the measured step of median length): communication "
        f"per {_LANE_NAMES.get(lanes.by, lanes.by)}, coloured by role"
    )
    if lanes.by != "rank":
        title += "\nheight in a lane: the share of its ranks inside a call of that role"
    if not lanes.ops.num_rows and not lanes.windows.num_rows:
        return _empty(fig, title)
    ax = fig.add_subplot()
    scale = 1e3
    w_lane = lanes.windows.column("lane").to_numpy()
    w_a = lanes.windows.column("start_s").to_numpy() * scale
    w_b = lanes.windows.column("end_s").to_numpy() * scale
    for lane in range(n):
        mine = w_lane == lane
        if mine.any():  # the lane's steps, from its earliest start to its latest end
            spans = _merged(w_a[mine], w_b[mine])
            ax.broken_barh(spans, (lane - 0.4, 0.8), color="grey", alpha=0.25, lw=0)
    o_lane = lanes.ops.column("lane").to_numpy()
    o_role = np.asarray([r or "" for r in lanes.ops.column("role").to_pylist()])
    o_a = lanes.ops.column("start_s").to_numpy() * scale
    o_b = np.maximum(lanes.ops.column("end_s").to_numpy() * scale, o_a)
    lo = float(min(o_a.min(initial=np.inf), w_a.min(initial=np.inf)))
    hi = float(max(o_b.max(initial=-np.inf), w_b.max(initial=-np.inf)))
    colors = colormaps["tab10"]
    handles = [Patch(color="grey", alpha=0.25, label="step (no bar: computing)")]
    for i, role in enumerate(sorted(set(o_role.tolist()))):
        color = ROLE_COLORS.get(role, colors((i + 4) % 10))
        for lane in range(n):
            mine = (o_lane == lane) & (o_role == role)
            if not mine.any():
                continue
            if lanes.ranks_per_lane[lane] == 1:
                bars = list(zip(o_a[mine], o_b[mine] - o_a[mine], strict=True))
                ax.broken_barh(
                    bars, (lane - 0.35, 0.7), color=color, alpha=0.85, edgecolor="white", lw=0.4
                )
            else:
                x, share = _occupancy(o_a[mine], o_b[mine], lo, hi, lanes.ranks_per_lane[lane])
                ax.fill_between(
                    x,
                    lane + 0.35,
                    lane + 0.35 - 0.7 * share,
                    color=color,
                    alpha=0.6,
                    lw=0,
                    step="post",
                )
        handles.append(Patch(color=color, label=role or "(no role)"))
    ax.set_yticks(range(n), lanes.labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_title(title, fontsize="medium")
    ax.set(xlabel=f"time from the start of step {steps[0]} (ms)")
    ax.legend(
        handles=handles,
        fontsize=LEGEND,
        title="comm, by role",
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    return fig


def _merged(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """Intervals as (start, length), overlapping ones merged."""
    order = np.argsort(starts)
    out: list[list[float]] = []
    for a, b in zip(starts[order], ends[order], strict=True):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], float(b))
        else:
            out.append([float(a), float(b)])
    return [(a, b - a) for a, b in out]


def _occupancy(
    starts: np.ndarray, ends: np.ndarray, lo: float, hi: float, ranks: int, bins: int = 600
) -> tuple[np.ndarray, np.ndarray]:
    """The share of ``ranks`` inside a call over ``bins`` bins of [lo, hi] (each call
    counted over the bins its interval covers, at the bins' resolution)."""
    width = (hi - lo) / bins or 1.0
    first = np.clip(((starts - lo) / width).astype(int), 0, bins - 1)
    last = np.clip(((ends - lo) / width).astype(int), 0, bins - 1)
    edges = np.zeros(bins + 1)
    np.add.at(edges, first, 1)
    np.add.at(edges, last + 1, -1)
    share = np.minimum(np.cumsum(edges)[:bins] / ranks, 1.0)
    x = lo + np.arange(bins) * width
    return x, share
