"""Assemble the report of one run from the analyses."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from commlens.analysis import breakdown, lanes, ops, skew, steps, throughput, utilization
from commlens.analysis.coverage import headline_coverage
from commlens.analysis.rankpass import RankPass, rank_pass
from commlens.errors import UsageError
from commlens.report.document import Column, Document, Section, plot
from commlens.report.highlights import highlights
from commlens.report.nodes import node_lines
from commlens.report.provenance import (
    CALLER_BLOCKED,
    exposed_meaning,
    provenance_facts,
    synthetic_times,
)
from commlens.report.spread import (
    MANY_RANKS,
    WORST,
    busiest_per_source,
    by_role,
    many_groups,
    rank_spread_note,
    top_rows,
)
from commlens.trace.files import format_ranks
from commlens.trace.layout import MANIFEST
from commlens.trace.reader import RunView, StepRange

C = Column
OP_COLUMNS = (
    C("op", "op"),
    C("pg_name", "group"),
    C("pg_ranks", "group ranks", "ranks"),
    C("role", "role"),
    C("ranks", "ranks", "int"),
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
    C("time_s", "time (s)", "s"),
    C("service_s", "service (s)", "s"),
    C("avg_latency_s", "avg lat (us)", "us"),
    C("algbw_GBps", "algbw (GB/s)", "gbps"),
    C("busbw_GBps", "busbw (GB/s)", "gbps"),
)
SIZE_COLUMNS = (
    C("op", "op"),
    C("pg_name", "group"),
    C("role", "role"),
    C("size_bucket_bytes", "size >=", "size"),
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
    C("wire_bytes_ring", "wire ring (bytes)", "bytes"),
    C("wire_bytes_study_b", "wire B (bytes)", "bytes"),
    C("mean_s", "mean (us)", "us"),
    C("p50_s", "p50 (us)", "us"),
    C("p99_s", "p99 (us)", "us"),
    C("busbw_GBps", "busbw (GB/s)", "gbps"),
)
STEP_COLUMNS = (
    C("step", "step", "int"),
    C("ranks", "ranks", "int"),
    C("step_s", "step (s)", "s"),
    C("comm_s", "comm (s)", "s"),
    C("comm_share", "comm (%)", "pct"),
    C("exposed_s", "exposed (s)", "s"),
    C("exposed_share", "exposed (%)", "pct"),
    C("overlapped_s", "overlapped (s)", "s"),
    C("ops", "ops", "int"),
    C("bytes", "bytes", "bytes"),
)
RANK_COLUMNS = (
    C("rank", "rank", "int"),
    C("steps", "steps", "int"),
    C("step_s", "steps (s)", "s"),
    C("comm_s", "comm (s)", "s"),
    C("comm_share", "comm (%)", "pct"),
    C("exposed_s", "exposed (s)", "s"),
    C("exposed_share", "exposed (%)", "pct"),
    C("ops", "ops", "int"),
    C("bytes", "bytes", "bytes"),
)
ROLE_OP_COLUMNS = (
    C("op", "op"),
    C("groups", "groups"),
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
    C("time_s", "time (s)", "s"),
    C("service_s", "service (s)", "s"),
    C("avg_latency_s", "avg lat (us)", "us"),
    C("service_s_min", "service/group min (s)", "s"),
    C("service_s_median", "median (s)", "s"),
    C("service_s_max", "max (s)", "s"),
    C("worst_group", "busiest group"),
)
ROLE_SKEW_COLUMNS = (
    C("op", "op"),
    C("groups", "groups"),
    C("instances", "instances", "int"),
    C("mean_skew_s", "mean skew (us)", "us"),
    C("p99_skew_s", "p99 skew (us)", "us"),
    C("max_skew_s", "max skew (us)", "us"),
    C("wait_s", "wait last (s)", "s"),
    C("wait_share", "wait (%)", "pct"),
    C("wait_s_min", "wait/group min (s)", "s"),
    C("wait_s_median", "median (s)", "s"),
    C("wait_s_max", "max (s)", "s"),
    C("worst_group", "most waiting group"),
)
ROLE_SIZE_COLUMNS = (
    C("op", "op"),
    C("groups", "groups"),
    C("size_bucket_bytes", "size >=", "size"),
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
    C("wire_bytes_ring", "wire ring (bytes)", "bytes"),
    C("mean_s", "mean (us)", "us"),
    C("p99_s", "p99 (us)", "us"),
    C("mean_s_min", "mean/group min (us)", "us"),
    C("mean_s_median", "median (us)", "us"),
    C("mean_s_max", "max (us)", "us"),
    C("worst_group", "slowest group"),
)
RANK_SPREAD = [("comm_share", "comm (%)"), ("exposed_share", "exposed (%)")]
"""The Ranks table's columns summarised as a distribution over many ranks."""
SHARE_COLUMNS = (
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
    C("time_s", "time (s)", "s"),
    C("wait_s", "blocked (s)", "s"),
    C("time_share", "share (%)", "pct"),
)
HIST_COLUMNS = (
    C("op", "op"),
    C("size_bucket_bytes", "size >=", "size"),
    C("count", "count", "int"),
    C("bytes", "bytes", "bytes"),
)
SKEW_COLUMNS = (
    C("op", "op"),
    C("pg_name", "group"),
    C("role", "role"),
    C("instances", "instances", "int"),
    C("mean_skew_s", "mean skew (us)", "us"),
    C("p99_skew_s", "p99 skew (us)", "us"),
    C("max_skew_s", "max skew (us)", "us"),
    C("queue_s", "queued (s)", "s"),
    C("wait_s", "wait last (s)", "s"),
    C("transfer_s", "transfer (s)", "s"),
    C("wait_share", "wait (%)", "pct"),
)
STRAGGLER_COLUMNS = (
    C("straggler_rank", "#", "int"),
    C("rank", "rank", "int"),
    C("instances", "instances", "int"),
    C("last_count", "last to arrive", "int"),
    C("blame_s", "others waited (s)", "s"),
    C("mean_lateness_s", "mean late (us)", "us"),
    C("wait_s", "own wait (s)", "s"),
)
UTIL_COLUMNS = (
    C("source", "source"),
    C("unit", "rank/node"),
    C("mean_gbit_s", "mean (Gbit/s)", "gbit"),
    C("peak_gbit_s", "peak (Gbit/s)", "gbit"),
    C("bytes", "bytes", "bytes"),
)
THROUGHPUT_COLUMNS = (
    C("rank", "rank", "int"),
    C("steps", "steps", "int"),
    C("step_s", "step (s)", "s"),
    C("tokens_per_s", "tokens/s", "rate"),
    C("tflops", "TFLOP/s", "float"),
    C("last_loss", "last loss", "float"),
)

# Keys of each "ops" entry in the JSON report (a stable contract: keys are only ever added).
OP_KEYS = (
    "op",
    "pg_name",
    "pg_ranks",
    "group_size",
    "role",
    "ranks",
    "count",
    "bytes",
    "time_s",
    "avg_latency_s",
    "algbw_GBps",
    "busbw_GBps",
    "service_s",
    "queue_s",
    "peer_wait_s",
    "transfer_s",
)


def run_facts(run: RunView) -> list[tuple[str, str]]:
    m = run.manifest
    facts = [
        ("run", str(run.path)),
        ("world size", str(run.world_size)),
        ("backend", str(m.get("backend", "?"))),
    ]
    if m.get("torch_version"):
        facts.append(("torch", str(m["torch_version"])))
    workload = m.get("workload")
    if isinstance(workload, dict) and workload:
        facts.append(("workload", _workload_line(workload)))
    if run.steps is not None:
        first, stop = run.steps
        facts.append(
            (
                "steps",
                f"{'' if first is None else first}:{'' if stop is None else stop} (only these)",
            )
        )
    facts += provenance_facts(m)
    if run.missing_ranks:
        facts.append(
            (
                "missing ranks",
                format_ranks(run.missing_ranks) + " (excluded from cross-rank figures)",
            )
        )
    return facts


# Workload fields worth a glance, in this order (the JSON has them all).
_WORKLOAD_KEYS = (
    "model",
    "preset",
    "scheme",
    "dp",
    "tp",
    "pp",
    "seq_len",
    "micro_batch",
    "microbatches",
    "global_batch",
    "dtype",
    "steps",
)


def _workload_line(workload: dict[str, Any]) -> str:
    dims = workload.get("dims")
    if isinstance(dims, dict):  # the parallel layout, flattened in
        workload = {**workload, **{k: v for k, v in dims.items() if k not in workload}}
    shown = [k for k in _WORKLOAD_KEYS if k in workload and not isinstance(workload[k], dict)]
    if not shown:
        shown = sorted(k for k, v in workload.items() if not isinstance(v, (dict, list)))
    return ", ".join(f"{k}={workload[k]}" for k in shown)


def run_title(run: RunView) -> str:
    """What was run, in a line: :func:`run_brief`, then the backend and the run's name."""
    return f"commlens report: {run_brief(run)} ({run.manifest.get('backend', '?')}; {run.name})"


class _Described(Protocol):
    """What :func:`run_brief` reads of a run (a view, or whatif's ops of it)."""

    @property
    def manifest(self) -> dict[str, Any]: ...

    @property
    def world_size(self) -> int: ...


def run_brief(run: _Described) -> str:
    """The workload (model, scheme, layout) or the traced script, on how many ranks and
    nodes, over which link: 'gpt-tiny dp, dp×tp×pp 4×1×1, 4 ranks on 2 nodes, 100mbit link'."""
    m = run.manifest
    topo = m.get("topology")
    topology: dict[str, Any] = topo if isinstance(topo, dict) else {}
    nodes = topology.get("nodes")
    where = f"{run.world_size} ranks"
    if isinstance(nodes, int) and nodes > 1:
        where += f" on {nodes} nodes, {topology.get('link') or 'unshaped'} link"
    what = _what_ran(m)
    return f"{what}, {where}" if what else where


def _what_ran(m: dict[str, Any]) -> str:
    """'gpt-tiny dp, dp×tp×pp 4×1×1', 'ddp_train.py', or '' when the manifest says neither."""
    workload = m.get("workload")
    if isinstance(workload, dict) and workload.get("model"):
        model = workload["model"]
        name = model.get("name") if isinstance(model, dict) else model
        nested = workload.get("dims")
        dims: dict[str, Any] = nested if isinstance(nested, dict) else workload
        layout = "×".join(str(dims[k]) for k in ("dp", "tp", "pp") if k in dims)
        parts = [str(name), str(workload.get("scheme") or "")]
        return " ".join(p for p in parts if p) + (f", dp×tp×pp {layout}" if layout else "")
    command = m.get("command")
    if isinstance(command, list):
        scripts = [str(c) for c in command if str(c).endswith(".py")]
        if scripts:
            return Path(scripts[0]).name
    return ""


def measured_steps(step_t: pa.Table, steps: StepRange | None) -> tuple[pa.Table, str]:
    """The rows of the Steps table the headline covers (``steps``; None: the job's
    recorded steps) and a line on the rows left out (set-up, warm-up, the tail) with
    their length, so that a long set-up never sets the scale of the steps."""
    kinds = step_t.column("kind").to_pylist()
    numbers = step_t.column("step").to_pylist()
    if steps is None:
        keep = [k == "step" for k in kinds]
    else:
        first, stop = steps
        keep = [
            k == "step" and (first is None or n >= first) and (stop is None or n < stop)
            for k, n in zip(kinds, numbers, strict=True)
        ]
    named = {
        "step": "warm-up step {n}",
        "setup": "set-up",
        "after last step": "after the last step",
    }
    out = [
        f"{named.get(k, k + ' step {n}').format(n=n)} ({t:.3g} s)"
        for k, n, t, kept in zip(
            kinds, numbers, step_t.column("step_s").to_pylist(), keep, strict=True
        )
        if not kept
    ]
    line = ""
    if out:
        shown = out if len(out) <= 3 else [*out[:2], f"{len(out) - 2} more"]
        line = "not drawn: " + ", ".join(shown)
    return step_t.filter(pa.array(keep, pa.bool_())), line


def _timeline(run: RunView, measured: pa.Table) -> list[tuple[str, Any]]:
    """The timeline of a few representative measured steps (none without steps): a plot
    of the Steps section, drawn in HTML and Markdown."""
    count = 3 if run.world_size <= lanes.MANY else 1  # one step at scale: cost
    drawn = lanes.lanes(run, lanes.representative_steps(measured, count))
    return [] if drawn is None else [("Timeline", plot("timeline", drawn))]


WHOLE_RUN = "every event, set-up included"
"""The scope of a table that covers more than the headline's steps."""


def _scope_to_headline(sections: list[Section], head: RankPass, steps: StepRange) -> None:
    """One scope per page: the plots of the op, message-size histogram and skew sections
    are drawn over the headline's steps (``head``) and say so; the tables that cover every
    event say that beside their titles (busbw needs the whole run's latency quantiles)."""
    first, stop = steps
    span = f"steps {first}–{stop - 1}" if first is not None and stop is not None else "--steps"
    drawn = f"measured {span}"
    head_plots = {
        "ops": ("comm_share_by_op", ops.op_table),
        "histogram": ("size_histogram", ops.size_histogram),
        "skew": ("skew_vs_transfer", skew.skew_table),
    }
    for section in sections:
        if section.key in ("ops", "phases", "modules", "sizes", "histogram", "skew", "stragglers"):
            section.scope = WHOLE_RUN
        if section.key == "utilization":
            section.scope = "the whole job"
        if section.key in head_plots and section.plots:
            name, table = head_plots[section.key]
            section.plots = [(section.plots[0][0], plot(name, table(head), drawn))]


def _outside_note(step_t: pa.Table) -> str:
    """Which rows of the Steps table are not steps of the job (set-up, the tail)."""
    rows = [r for r in step_t.to_pylist() if r["kind"] != "step"]
    if not rows:
        return ""
    named = ", ".join(f"{r['step']} ({r['kind']})" for r in rows)
    return (
        f" Rows {named} hold events outside the job's recorded steps: shown on their own, "
        "not summed into the Ranks table."
    )


TABLES_SCOPE = (
    "the tables below cover every event, set-up included, and the Ranks table every "
    "recorded step: their counts can exceed the headline's"
)
"""What the report's tables cover when its headline covers fewer steps."""


def util_note(nic: bool, inter: bool, link: float | None) -> str:
    """What the Link utilization table's sources are, for the sources it has."""
    parts = []
    if nic:
        parts.append(
            "nic tx: each node's transmit from its NIC byte counters (frames, headers "
            "included), the link's measurement"
        )
    if inter:
        parts.append(
            "events inter-node: the part of the ops' wire bytes (ring convention) that a "
            "node's ranks send to other nodes; it can pass the link's rate where the NIC "
            "does not, a send ending once its bytes are buffered, before they cross"
        )
    parts.append(
        "events: wire bytes (ring) spread over each op's duration"
        + (", intra-node (loopback) included" if inter else "")
    )
    line = "; ".join(parts)
    if nic or inter:
        line += ". Means are over the job's window, first op to last."
    return line + (f" The link's rate: {link:g} Gbit/s per node." if link else "")


SKEW_NOTE = (
    "queued = behind earlier ops of the group on the rank; wait last = for the last "
    "member to be ready; transfer = the rest; they add up to the time inside calls."
)


def _clamped_note(skew_t: pa.Table) -> str:
    clamped = sum(skew_t.column("clamped").to_pylist()) if skew_t.num_rows else 0
    if not clamped:
        return ""
    return (
        f"Cross-rank clock skew exceeded the measurement on {clamped} call(s): "
        "their wait is cut to their own service time and their transfer is 0."
    )


def _records(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def _headline(rp: RankPass, exposed: str) -> list[str]:
    """The highlights over the pass ``rp`` (the headline's steps)."""
    rank_t = steps.rank_summary(steps.step_table(rp))
    return highlights(
        ops.op_table(rp),
        rank_t,
        breakdown.phase_table(rp),
        skew.skew_table(rp),
        skew.straggler_table(rp),
        exposed,
    )


@dataclass(frozen=True)
class _Tables:
    """Every table of a report, from one rank pass."""

    op: pa.Table
    size: pa.Table
    hist: pa.Table
    per_rank_step: pa.Table
    step: pa.Table
    rank: pa.Table
    phase: pa.Table
    module: pa.Table
    skew: pa.Table
    straggler: pa.Table
    skew_step: pa.Table
    util: pa.Table
    nic: pa.Table | None
    inter: pa.Table | None
    util_sum: pa.Table
    tput: pa.Table
    tput_sum: pa.Table


def _tables(run: RunView, rp: RankPass, util_bins: int) -> _Tables:
    per_rank_step = steps.step_table(rp)
    nic_t = utilization.nic_utilization(rp)
    inter_t = utilization.inter_node_utilization(rp)
    tput_t = throughput.throughput_table(rp)
    return _Tables(
        op=ops.op_table(rp),
        size=ops.op_size_table(rp),
        hist=ops.size_histogram(rp),
        per_rank_step=per_rank_step,
        step=steps.step_summary(per_rank_step),
        rank=steps.rank_summary(per_rank_step),
        phase=breakdown.phase_table(rp),
        module=breakdown.module_table(rp),
        skew=skew.skew_table(rp),
        straggler=skew.straggler_table(rp),
        skew_step=skew.skew_by_step(rp),
        util=utilization.event_utilization(rp, util_bins),
        nic=nic_t,
        inter=inter_t,
        util_sum=utilization.utilization_summary(rp, util_bins, inter_t),
        tput=tput_t,
        tput_sum=throughput.throughput_summary(tput_t),
    )


def build_report(run: RunView, *, util_bins: int = 100, csv_table: str = "sizes") -> Document:
    """Every analysis of ``run`` as one document (tables, plots and JSON data);
    ``csv_table``: the key of its JSON data whose table the CSV output holds."""
    coverage = headline_coverage(run)
    if coverage.steps is not None and not (run.path / MANIFEST).is_file():
        coverage = replace(coverage, steps=None, line="headline covers every step")
    rp = rank_pass(
        run, util_bins=util_bins, match=True, quantiles=True, nic=True, headline=coverage.steps
    )
    t = _tables(run, rp, util_bins)
    drawn, left_out = measured_steps(t.step, coverage.steps)
    exposed = exposed_meaning(run.manifest)
    data = _report_data(run, rp, t)
    if rp.head is None:  # the view's own steps
        lines = [*highlights(t.op, t.rank, t.phase, t.skew, t.straggler, exposed), coverage.line]
    else:  # the headline's steps are fewer than the tables'
        lines = [*_headline(rp.head, exposed), f"{coverage.line}; {TABLES_SCOPE}"]
    data["highlights"] = lines = _run_lines(run, lines, t.straggler)
    data["headline_steps"] = list(coverage.steps) if coverage.steps is not None else None
    lead_title = "Time per measured step (mean over ranks)"
    sections = _report_sections(run, t, exposed, drawn)
    if rp.head is not None and coverage.steps is not None:
        _scope_to_headline(sections, rp.head, coverage.steps)
    return Document(
        highlights=lines,
        lead=(lead_title, plot("step_breakdown", drawn, left_out, lead_title)),
        title=run_title(run),
        facts=run_facts(run),
        sections=sections,
        warnings=list(run.warnings),
        data=data,
        csv_table=_csv_table(data, csv_table),
    )


def _report_sections(run: RunView, t: _Tables, exposed: str, drawn: Any) -> list[Section]:
    cross_note = (
        f"Ranks {format_ranks(run.missing_ranks)} are missing: groups that "
        "include them are left out."
        if run.missing_ranks
        else ""
    )
    sections = [
        _ops_section(t.op),
        _steps_section(run, t.step, exposed, drawn),
        _ranks_section(t.rank),
        Section("phases", "Communication by phase", t.phase, (C("phase", "phase"), *SHARE_COLUMNS)),
        Section(
            "modules",
            "Communication by module",
            t.module,
            (C("module", "module", "name"), C("phases", "phases"), *SHARE_COLUMNS),
            max_rows=20,
        ),
        _sizes_section(t.size),
        Section(
            "histogram",
            "Message-size histogram",
            t.hist,
            HIST_COLUMNS,
            max_rows=40,
            plots=[("Message sizes", plot("size_histogram", t.hist))],
        ),
        _skew_section(t.skew, t.op, cross_note),
        Section(
            "stragglers",
            "Stragglers (who arrives last)",
            t.straggler,
            STRAGGLER_COLUMNS,
            max_rows=16,
            note=cross_note,
        ),
        _utilization_section(run, t.util_sum, t.util, t.nic, t.inter),
    ]
    if t.tput_sum.num_rows:
        sections.append(
            Section(
                "throughput", "Throughput (warm-up steps left out)", t.tput_sum, THROUGHPUT_COLUMNS
            )
        )
    return sections


def _report_data(run: RunView, rp: RankPass, t: _Tables) -> dict[str, Any]:
    """The report's JSON data, before its highlights."""
    optional = {"nic_utilization": t.nic, "inter_node_utilization": t.inter}
    return {
        "run": run.manifest,
        "ops": [{k: row[k] for k in OP_KEYS} for row in _records(t.op)],
        "missing_ranks": run.missing_ranks,
        "step_range": list(run.steps) if run.steps is not None else None,
        "warnings": run.warnings,
        "sizes": _records(t.size),
        "steps": _records(t.step),
        "rank_steps": _records(t.per_rank_step),
        "ranks": _records(t.rank),
        "phases": _records(t.phase),
        "modules": _records(t.module),
        "histogram": _records(t.hist),
        "skew": _records(t.skew),
        "skew_by_step": _records(t.skew_step),
        "stragglers": _records(t.straggler),
        "utilization": _records(t.util_sum),
        "utilization_series": _records(t.util),
        **{key: _records(table) if table is not None else [] for key, table in optional.items()},
        "phase_ops": _records(breakdown.op_phase_table(rp)),
        "throughput": _records(t.tput),
    }


def _steps_section(run: RunView, step_t: pa.Table, exposed: str, drawn: Any) -> Section:
    return Section(
        "steps",
        "Steps (step time of the slowest rank; comm, exposed and overlapped: mean over "
        "ranks; ops and bytes: all ranks together)",
        step_t,
        STEP_COLUMNS,
        max_rows=50,
        note="comm = union of the step's op intervals inside its window (overlaps "
        "counted once); exposed = "
        f"{'time the caller was blocked' if exposed == CALLER_BLOCKED else exposed}; "
        "overlapped = comm - exposed." + _outside_note(step_t),
        plots=_timeline(run, drawn),
    )


def _utilization_section(
    run: RunView,
    util_sum: pa.Table,
    util_t: pa.Table,
    nic_t: pa.Table | None,
    inter_t: pa.Table | None,
) -> Section:
    link = utilization.link_gbit(run.manifest)
    top, spread = busiest_per_source(util_sum)  # past MANY_RANKS ranks or nodes
    more = top.num_rows < util_sum.num_rows
    note = util_note(nic_t is not None and nic_t.num_rows > 0, inter_t is not None, link)
    return Section(
        "utilization",
        "Link utilization"
        + (
            f" (per source, the {2 * WORST} busiest of more than {MANY_RANKS}; --format json "
            "lists each)"
            if more
            else ""
        ),
        top,
        UTIL_COLUMNS,
        note="\n".join(filter(None, [note, spread])),
        plots=[
            (
                "Utilization over time",
                plot(
                    "utilization",
                    util_t,
                    nic_t,
                    inter_t,
                    link,
                    utilization.burst_bytes(run.manifest),
                ),
            )
        ],
    )


def _run_lines(run: RunView, lines: list[str], straggler_t: pa.Table) -> list[str]:
    """The highlights with the nodes' lines before the last; for imported aggregate-only
    data, only the headline's, after saying its times are synthetic."""
    lines = list(lines)
    lines[-1:-1] = node_lines(run.manifest, straggler_t)
    if synthetic_times(run.manifest):
        lines = [
            "imported aggregate-only data: times are synthetic; only op counts and bytes "
            "are measurements",
            *[line for line in lines if line.startswith("headline")],
        ]
    return lines


def _sizes_section(size_t: pa.Table) -> Section:
    """The size table: a row per op, group and size bucket, or per op, role and size
    bucket past MANY_GROUPS groups."""
    note = (
        "wire ring = S x (n-1)/n factors of conventions §2; "
        "wire B = Study B's convention (without (n-1)/n)."
    )
    plots = [("busbw vs message size", plot("busbw_vs_size", size_t))]
    title = "By op, group and message size (log2 buckets)"
    if not size_t.num_rows or not many_groups(size_t):
        return Section("sizes", title, size_t, SIZE_COLUMNS, max_rows=40, note=note, plots=plots)
    table = by_role(
        size_t,
        ["op", "size_bucket_bytes"],
        sums=["count", "bytes", "wire_bytes_ring", "wire_bytes_study_b", "time_s"],
        maxima=["p99_s"],
        worst="mean_s",
        ratios={"mean_s": ("time_s", "count")},
    )
    return Section(
        "sizes",
        f"By op, role and message size (log2 buckets; {size_t.num_rows:,} op, group and size "
        "rows summed per role and group size; --format json lists each)",
        table,
        ROLE_SIZE_COLUMNS,
        max_rows=40,
        note=note + " p99: of the worst group; mean/group: each group's mean latency, min, "
        "median and max over the groups.",
        plots=plots,
    )


def _ranks_section(rank_t: pa.Table) -> Section:
    """The Ranks table: every rank, or past MANY_RANKS the ranks with the most exposed
    communication, the columns' distribution in the note."""
    title = "Ranks (summed over the recorded steps; set-up and the tail left out)"
    note = rank_spread_note(rank_t, RANK_SPREAD)
    if rank_t.num_rows <= MANY_RANKS:
        return Section("ranks", title, rank_t, RANK_COLUMNS, note=note)
    worst = top_rows(rank_t, "exposed_share", 2 * WORST)
    return Section(
        "ranks",
        f"Ranks: the {worst.num_rows} of {rank_t.num_rows:,} with the highest exposed share "
        "(summed over the recorded steps; set-up and the tail left out; --format json lists "
        "each)",
        worst,
        RANK_COLUMNS,
        note=note,
    )


def _ops_section(op_t: pa.Table) -> Section:
    """The op table: a row per op and group, or per op and role past MANY_GROUPS groups."""
    plots = [("Share of communication time by op", plot("comm_share_by_op", op_t))]
    if not many_groups(op_t):
        return Section(
            "ops", "Communication by op and process group", op_t, OP_COLUMNS, plots=plots
        )
    table = by_role(
        op_t,
        ["op"],
        sums=["count", "bytes", "time_s", "service_s"],
        worst="service_s",
        ratios={"avg_latency_s": ("time_s", "count")},
    )
    return Section(
        "ops",
        f"Communication by op and role ({op_t.num_rows:,} op and group rows summed per "
        "role and group size; --format json lists each)",
        table,
        ROLE_OP_COLUMNS,
        note="service/group: each group's service time; min, median and max over the groups.",
        plots=plots,
    )


def _skew_section(skew_t: pa.Table, op_t: pa.Table, cross_note: str) -> Section:
    """The skew table: a row per op and group, or per op and role past MANY_GROUPS groups
    (the groups' ranks from the op table)."""
    note = " ".join(filter(None, [SKEW_NOTE, _clamped_note(skew_t), cross_note]))
    plots = [("Waiting vs transfer", plot("skew_vs_transfer", skew_t))]
    title = "Cross-rank arrival skew (collectives matched across their group)"
    if not skew_t.num_rows or not many_groups(skew_t):
        return Section("skew", title, skew_t, SKEW_COLUMNS, note=note, plots=plots)
    weighted = pc.multiply(skew_t.column("mean_skew_s"), skew_t.column("instances"))
    members = dict(zip(*(op_t.column(k).to_pylist() for k in ("pg_name", "pg_ranks")), strict=True))
    pg_ranks = pa.array([members.get(g) for g in skew_t.column("pg_name").to_pylist()])
    table = by_role(
        skew_t.append_column("skew_sum_s", weighted).append_column("pg_ranks", pg_ranks),
        ["op"],
        sums=["instances", "skew_sum_s", "time_s", "queue_s", "wait_s", "transfer_s"],
        maxima=["p99_skew_s", "max_skew_s"],
        worst="wait_s",
        ratios={"mean_skew_s": ("skew_sum_s", "instances"), "wait_share": ("wait_s", "time_s")},
    )
    return Section(
        "skew",
        f"{title}, per op and role ({skew_t.num_rows:,} op and group rows; --format json "
        "lists each)",
        table,
        ROLE_SKEW_COLUMNS,
        note=note + " p99 skew: of the worst group; wait/group: each group's wait for the "
        "last rank, min, median and max over the groups.",
        plots=plots,
    )


def _csv_table(data: dict[str, Any], key: str) -> pa.Table:
    """The table behind ``data[key]`` (a list of rows) for the CSV output."""
    rows = data.get(key)
    if not isinstance(rows, list):
        raise UsageError(f"the report has no table {key!r}")
    return pa.Table.from_pylist(rows)
