"""The report of a sweep directory: tables and plots across the grid.

``commlens report SWEEP_DIR`` delegates here (:func:`render_sweep`); the
document is the same :class:`~commlens.report.document.Document` a run's
report is, so text, Markdown, HTML, JSON and CSV come from the same
renderers. Sections appear when the grid answers them (several links,
several sequence lengths, ZeRO beside DP, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.report.document import Column, Document, Section
from commlens.sweep import figures, findings
from commlens.sweep.catalog import SPEC_FILE, open_catalog


def _section(
    key: str,
    title: str,
    table: pa.Table,
    cols: list[tuple[str, str, str]],
    note: str = "",
    plot: tuple[str, Callable[[pa.Table], Any]] | None = None,
) -> Section:
    columns = [Column(k, t, f) for k, t, f in cols if k in table.column_names]
    plots = [(plot[0], lambda: plot[1](table))] if plot else []
    return Section(key, title, table, columns, note, plots)


def _sections(con: Any) -> list[Section]:
    out = [
        _section(
            "points",
            "Points",
            findings.points_table(con),
            [
                ("model", "model", "str"),
                ("scheme", "scheme", "str"),
                ("layout", "dp×tp×pp", "str"),
                ("seq_len", "seq len", "int"),
                ("micro_batch", "micro-batch", "int"),
                ("network", "network", "str"),
                ("status", "status", "str"),
                ("step_s", "step (s)", "s"),
                ("comm_share", "comm (% of step)", "pct"),
                ("tokens_per_s", "tokens/s", "rate"),
                ("peak_link_gbit_s", "link peak (Gbit/s)", "gbit"),
                ("validated", "validate", "str"),
                ("error", "error / reason", "str"),
            ],
        )
    ]
    speed = findings.link_speedup(con)
    if speed.num_rows:
        out.append(
            _section(
                "link_speedup",
                "Speedup from the slowest to the fastest link (Study A)",
                speed,
                [
                    ("model", "model", "str"),
                    ("scheme", "scheme", "str"),
                    ("layout", "dp×tp×pp", "str"),
                    ("slowest_link", "slowest link", "str"),
                    ("slowest_step_s", "step there (s)", "s"),
                    ("fastest_link", "fastest link", "str"),
                    ("fastest_step_s", "step there (s)", "s"),
                    ("speedup", "speedup", "x"),
                ],
                "Study A: data parallelism gains far more from a faster link than model "
                "parallelism, whose traffic is activations, not every gradient.",
                ("speedup per scheme", figures.speedup),
            )
        )
        out.append(
            _section(
                "shares",
                "Where the step goes per link (Study A)",
                findings.shares_by_link(con),
                [
                    ("model", "model", "str"),
                    ("scheme", "scheme", "str"),
                    ("link", "link", "str"),
                    ("step_s", "step (s)", "s"),
                    ("comm_share", "comm (% of step)", "pct"),
                    ("allreduce_share", "dp/tp all-reduce (%)", "pct"),
                    ("pp_recv_share", "pipeline recv (%)", "pct"),
                    ("embedding_allreduce_share", "embedding all-reduce (%)", "pct"),
                ],
                "Shares are time inside the calls over the step, mean over the ranks that "
                "issue them; a pipeline receive includes waiting for the other stage.",
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
                [
                    ("link", "link", "str"),
                    ("points", "points", "int"),
                    ("peak_gbit_s", "peak (Gbit/s)", "gbit"),
                    ("mean_peak_gbit_s", "mean of peaks (Gbit/s)", "gbit"),
                    ("peak_scheme", "peak in scheme", "str"),
                ],
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
                [
                    ("point_model", "measured model", "str"),
                    ("point_scheme", "scheme", "str"),
                    ("model", "predicted model", "str"),
                    ("layout", "dp×tp×pp", "str"),
                    ("network", "network", "str"),
                    ("step_s", "step (s)", "s"),
                    ("comm_share", "comm (% of step)", "pct"),
                    ("speedup", "speedup", "x"),
                    ("measured_speedup", "measured here", "x"),
                ],
                "Predicted with `commlens predict` (bf16, 100 TFLOP/s per GPU) beside the "
                "speedup measured in this sweep from its slowest to its fastest link.",
                ("predicted speedup", figures.predicted),
            )
        )
    out += _volume_sections(con)
    return out


def _volume_sections(con: Any) -> list[Section]:
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


def _title(spec_file: Path) -> str:
    """The sweep file's title ('' when there is none or the file no longer parses)."""
    import tomllib

    try:
        title = tomllib.loads(spec_file.read_text()).get("sweep", {}).get("title", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return title if isinstance(title, str) else ""


def build_sweep_document(path: str | Path) -> Document:
    """The sweep's report as a Document."""
    sweep = Path(path)
    con = open_catalog(sweep)
    try:
        counts = dict(con.execute("SELECT status, count(*) FROM points GROUP BY status").fetchall())
        sections = _sections(con)
        data: dict[str, Any] = {"sweep": str(sweep), "status": counts}
        for s in sections:
            data[s.key] = s.table.to_pylist()
        points = con.sql("SELECT * FROM points ORDER BY rowid").to_arrow_table()
    finally:
        con.close()
    title_line = _title(sweep / SPEC_FILE)
    facts = [("sweep", str(sweep))]
    if title_line:
        facts.append(("about", title_line))
    facts.append(("points", ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))))
    warnings = []
    if counts.get("pending"):
        warnings.append(f"{counts['pending']} points not run yet: run `commlens sweep` again")
    return Document(
        title=f"commlens sweep report: {sweep.name}",
        facts=facts,
        sections=sections,
        warnings=warnings,
        data=data,
        csv_table=points,
    )


def render_sweep(
    path: str | Path, fmt: str | None, output: str | None, width: int | None = None
) -> str:
    """Render the sweep at ``path`` like ``commlens report``; returns the format used."""
    from commlens.report.output import emit

    return emit(build_sweep_document(path), output, fmt, width=width)


def save_figures(path: str | Path, out_dir: str | Path, prefix: str = "") -> list[Path]:
    """Write every plot of the sweep's report as PNG into ``out_dir``."""
    from commlens.report.plots import png

    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for section in build_sweep_document(path).sections:
        for _, make in section.plots:
            file = target / f"{prefix}{section.key}.png"
            file.write_bytes(png(make()))
            written.append(file)
    return written
