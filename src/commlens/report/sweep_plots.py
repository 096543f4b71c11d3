"""Plots of a sweep's findings (matplotlib Figures, no pyplot state)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from commlens.report.plots import LEGEND, log2_buckets
from commlens.units import format_bytes

_SIZE = (9.0, 4.5)


def _fig() -> Figure:
    return Figure(figsize=_SIZE, layout="constrained")


def _grouped_bars(ax: object, groups: list[str], series: dict[str, list[float]]) -> None:
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label)  # type: ignore[attr-defined]
    ax.set_xticks(x, groups)  # type: ignore[attr-defined]


def speedup(
    table: pa.Table, bands: dict[tuple[str, str], tuple[float, float]] | None = None
) -> Figure:
    """Speedup from the slowest to the fastest link, per scheme (bars per model), each with
    its noise band (``bands`` by (model, scheme): the speedup's low and high ends from
    the middle half of both points' steps) as an error bar."""
    fig = _fig()
    ax = fig.add_subplot()
    rows = table.to_pylist()
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    bands = bands or {}
    x = np.arange(len(schemes))
    width = 0.8 / max(len(models), 1)
    for i, m in enumerate(models):
        found = {r["scheme"]: r for r in rows if r["model"] == m}
        values = [float(found[s]["speedup"]) if s in found else np.nan for s in schemes]
        pos = x + (i - (len(models) - 1) / 2) * width
        ax.bar(pos, values, width, label=m)
        ranged = [(p, bands[(m, s)]) for p, s in zip(pos, schemes, strict=True) if (m, s) in bands]
        if ranged:  # the band is its own range: the best steps' ratio may lie outside it
            at = [p for p, _ in ranged]
            lows, highs = [b[0] for _, b in ranged], [b[1] for _, b in ranged]
            ax.vlines(at, lows, highs, color="black", lw=1.5)
            ax.hlines(
                [*lows, *highs],
                [a - width / 8 for a in at * 2],
                [a + width / 8 for a in at * 2],
                color="black",
                lw=1.5,
            )
    ax.set_xticks(x, schemes)
    ax.axhline(1.0, color="grey", lw=0.8)
    lo = rows[0]["slowest_link"] if rows else "?"
    hi = rows[0]["fastest_link"] if rows else "?"
    band = (
        "\nbars: best steps' ratio; black range: the noise band (middle half of both points' steps)"
        if bands
        else ""
    )
    ax.set_title(f"Step-time speedup, {lo} → {hi} link{band}", fontsize="medium")
    ax.set(ylabel="speedup (x)")
    ax.legend(fontsize=LEGEND)
    return fig


def shares(table: pa.Table) -> Figure:
    """Share of the step in the key op of each scheme, per link (slowest first)."""
    fig = Figure(figsize=(_SIZE[0], 5.6), layout="constrained")
    ax = fig.add_subplot()
    rows = table.to_pylist()
    rates = {r["link"]: r["link_gbit_s"] for r in rows}
    links = sorted(rates, key=lambda lk: rates[lk] if rates[lk] is not None else math.inf)
    lines: dict[str, dict[str, float]] = defaultdict(dict)
    transfer: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["scheme"] == "pp":
            key = "pipeline recv + embedding all-reduce"
            share = r["pp_recv_share"] + r["embedding_allreduce_share"]
        else:
            key, share = "all-reduce", r["allreduce_share"]
            transfer[f"{r['model']} {r['scheme']}"][r["link"]] = r["allreduce_transfer_share"]
        lines[f"{r['model']} {r['scheme']} ({key})"][r["link"]] = share
    x = np.arange(len(links))
    for label, by_link in lines.items():
        ys = [100 * by_link[lk] if lk in by_link else np.nan for lk in links]
        (line,) = ax.plot(x, ys, marker="o", label=label)
        part = transfer.get(label.split(" (")[0])
        if part and any(v for v in part.values()):
            ts = [100 * part[lk] if part.get(lk) is not None else np.nan for lk in links]
            ax.plot(x, ts, ls="--", marker=".", color=line.get_color())
    ax.set_xticks(x, links)
    ax.set(
        title="Share of the step in the scheme's key ops (dashed: all-reduce transfer)",
        xlabel="link",
        ylabel="% of step",
    )
    fig.legend(fontsize=LEGEND, ncol=3, loc="outside lower center")
    return fig


def utilization(table: pa.Table) -> Figure:
    """Peak NIC throughput per link rate, each link's rate drawn across its bars and the
    peak's share of it written above them."""
    fig = _fig()
    ax = fig.add_subplot()
    rows = table.to_pylist()
    labels = [r["link"] for r in rows]
    x = np.arange(len(rows))
    ax.bar(x, [r["peak_gbit_s"] for r in rows], color="#1f77b4", label="peak (any point)")
    ax.bar(
        x,
        [r["mean_peak_gbit_s"] for r in rows],
        color="#aec7e8",
        width=0.5,
        label="mean of the points' peaks",
    )
    for i, r in enumerate(rows):
        rate = r.get("link_gbit_s")
        if rate and math.isfinite(rate):  # an unshaped link has no rate to draw
            ax.hlines(
                rate,
                i - 0.45,
                i + 0.45,
                color="black",
                ls="--",
                lw=1.5,
                label="link rate" if i == 0 else "_nolegend_",
            )
            ax.text(
                i,
                max(rate, r["peak_gbit_s"]) * 1.02,
                f"peak {r['peak_gbit_s'] / rate:.0%} of rate",
                ha="center",
                va="bottom",
                fontsize="small",
            )
    ax.set_xticks(x, labels)
    tops = [float(v) for r in rows for v in (r["peak_gbit_s"], r.get("link_gbit_s")) if v]
    ax.set_ylim(0, max((v for v in tops if math.isfinite(v)), default=1.0) * 1.15)
    ax.set(
        title="Peak link utilization per link rate (NIC counters, tx of either node)",
        ylabel="Gbit/s",
    )
    ax.legend(fontsize=LEGEND, loc="upper left")
    return fig


def predicted(table: pa.Table) -> Figure:
    """The model's speedup over the first network at the studies' scale, per scheme."""
    fig = _fig()
    ax = fig.add_subplot()
    rows = table.to_pylist()

    def group(r: dict[str, object]) -> str:
        return f"{r['point_scheme']}\n{r['model']}\n{r['layout']}"  # three short lines

    groups = list(dict.fromkeys(group(r) for r in rows))
    nets = list(dict.fromkeys(r["network"] for r in rows))
    speed = {(group(r), r["network"]): r["speedup"] for r in rows}
    series = {n: [speed.get((g, n), 0.0) for g in groups] for n in nets}
    _grouped_bars(ax, groups, series)
    ax.tick_params(axis="x", labelsize="small")
    ax.set(title="Predicted speedup at the studies' scale", ylabel=f"speedup over {nets[0]}")
    ax.legend(fontsize=LEGEND)
    return fig


def volume_ops(table: pa.Table) -> Figure:
    """Wire bytes per rank per step, stacked by op and role, per job (the volume of a
    job does not depend on the link: the largest over its networks is shown)."""
    fig = _fig()
    ax = fig.add_subplot()
    rows = table.to_pylist()
    several = len({r["model"] for r in rows}) > 1

    def job(r: dict[str, object]) -> str:
        name = f"{r['scheme']} s={r['seq_len']}"
        return f"{r['model']} {name}" if several else name

    jobs = list(dict.fromkeys(job(r) for r in rows))
    keys = list(dict.fromkeys(f"{r['op']}/{r['role'] or '-'}" for r in rows))
    vol: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        k = (job(r), f"{r['op']}/{r['role'] or '-'}")
        vol[k] = max(vol[k], float(r["wire_bytes_per_rank_step"]))
    bottom = np.zeros(len(jobs))
    for key in keys:
        vals = np.array([vol[(j, key)] for j in jobs]) / 1e6
        ax.bar(jobs, vals, bottom=bottom, label=key)
        bottom += vals
    ax.tick_params(axis="x", labelsize="small", rotation=60)
    ax.set(title="Volume per op and role (per rank per step)", ylabel="wire MB (ring)")
    ax.legend(
        fontsize=LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1)
    )  # beside, not over, the bars
    return fig


def volume_seq(table: pa.Table) -> Figure:
    """Wire bytes per rank per step against the sequence length, per scheme."""
    fig = _fig()
    ax = fig.add_subplot()
    by: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in table.to_pylist():
        by[f"{r['model']} {r['scheme']}"].append((r["seq_len"], r["wire_bytes"]))
    for label, pts in by.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(
        title="Volume vs sequence length",
        xlabel="sequence length (tokens)",
        ylabel="wire MB per rank per step",
    )
    ax.legend(
        fontsize=LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1)
    )  # beside, not over, the bars
    return fig


def sizes(table: pa.Table) -> Figure:
    """Message-size histogram: calls per log2 bucket (every bucket from the smallest to
    the largest, empty ones too), a bar per scheme in each."""
    fig = Figure(figsize=(_SIZE[0] + 2, 5.0), layout="constrained")
    ax = fig.add_subplot()
    by: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in table.to_pylist():
        by[r["scheme"]][int(r["size_bucket_bytes"])] += int(r["count"])
    buckets = log2_buckets(b for counts in by.values() for b in counts)
    _grouped_bars(
        ax,
        [format_bytes(b) for b in buckets],
        {scheme: [float(counts.get(b, 0)) for b in buckets] for scheme, counts in by.items()},
    )
    ax.tick_params(axis="x", labelsize="small", rotation=60)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.8)  # a bucket of one call still shows
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set(
        title="Message sizes (calls per log2 bucket, all ranks)",
        xlabel="message size S (bucket floor)",
        ylabel="calls (log scale)",
    )
    ax.legend(fontsize=LEGEND)
    return fig


def ratio(table: pa.Table) -> Figure:
    """Each ZeRO stage's volume over DP's."""
    fig = _fig()
    ax = fig.add_subplot()
    rows = table.to_pylist()
    labels = [f"{r['scheme']} s={r['seq_len']}" for r in rows]
    ax.bar(labels, [r["ratio_to_dp"] for r in rows], color="#2ca02c")
    ax.axhline(1.5, color="#d62728", ls="--", lw=1, label="1.5x (Study B, ZeRO-3)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.tick_params(axis="x", labelsize="small", rotation=45)
    ax.set(title="Volume relative to DP", ylabel="wire bytes / DP's")
    ax.legend(fontsize=LEGEND)
    return fig
