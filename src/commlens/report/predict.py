"""What ``commlens predict`` shows: one job's prediction as a :class:`Document`.

The job and the modelled rank head the document; one table lists every
collective of that rank per step (with conventions §2's textbook volume beside
it and its time on each network), one the step time per network. ``data`` is
:meth:`Prediction.to_dict`, the JSON contract.

Cells are formatted here (MB to a few digits, times to four significant
figures, shares and speedups with their sign) and shown as written,
right-aligned where they are numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from commlens.report.document import Column, Document, Section
from commlens.units import plural

if TYPE_CHECKING:
    from commlens.predict.forecast import Prediction


def _number(key: str, title: str) -> Column:
    """A column of numbers formatted here, shown right-aligned."""
    return Column(key, title, align="right")


NETWORK_COLUMNS = (
    Column("network", "network"),
    _number("comm", "comm (s)"),
    _number("compute", "compute (s)"),
    _number("step", "step (s)"),
    _number("overlapped", "step, overlapped (s)"),
    _number("share", "comm share"),
    _number("speedup", "speedup"),
)


def mb(n: float) -> str:
    """Bytes as MB (1e6): whole numbers from 100, two decimals from 1, else 3 digits."""
    value = n / 1e6
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def _title(pred: Prediction) -> str:
    job, d = pred.job, pred.job.dims
    return (
        f"{job.model.name} {job.scheme}  dp={d.dp} tp={d.tp} pp={d.pp} "
        f"({plural(d.world_size, 'rank')}, {pred.settings['gpus_per_node']} per node)  "
        f"s={job.seq_len} b={job.micro_batch} k={job.microbatches} {job.dtype}"
        + ("  sequence-parallel" if job.sequence_parallel else "")
        + ("  recompute" if job.recompute else "")
    )


def _shown(pred: Prediction) -> str:
    s = pred.settings
    coords = pred.job.dims.coords(pred.shown_rank)
    where = ", ".join(f"{k} {coords[k]}" for k in ("dp", "tp", "pp"))
    return (
        f"per rank per step, rank {pred.shown_rank} ({where}) "
        f"(the most wire bytes); algorithm {s['algorithm']}, intra-node {s['intra']}, "
        f"{s['tflops']:g} TFLOP/s per rank; MB = 1e6 bytes"
    )


def _ops_section(pred: Prediction) -> Section:
    nets = pred.networks
    book = {(v.op, v.role): v for v in pred.textbook_volumes}
    columns = [
        Column("op", "op"),
        Column("role", "role"),
        _number("group", "group"),
        _number("calls", "calls"),
        _number("bytes", "S (MB)"),
        _number("wire", "wire, ring (MB)"),
        _number("wire_b", "wire, Study B (MB)"),
        _number("textbook", "textbook S (MB)"),
        *[_number(f"net{i}", f"{n.name} (s)") for i, n in enumerate(nets)],
    ]
    rows: list[list[str]] = []
    for v in pred.volumes:
        tb = book.get((v.op, v.role))
        rows.append(
            [
                v.op,
                v.role or "-",
                str(v.group_size),
                f"{v.calls:,}",
                mb(v.bytes),
                mb(v.wire_bytes),
                mb(v.wire_bytes_b),
                mb(tb.bytes) if tb else "-",
                *[f"{n.op_times_s.get((v.op, v.role), 0.0):.4g}" for n in nets],
            ]
        )
    predicted = {(v.op, v.role) for v in pred.volumes}
    for key, tb in book.items():  # textbook calls the workloads do not issue
        if key not in predicted:
            rows.append(
                [tb.op, tb.role, str(tb.group_size), "-", "-", "-", "-", mb(tb.bytes)]
                + ["-"] * len(nets)
            )
    vols = pred.volumes
    rows.append(
        [
            "total",
            "",
            "",
            f"{sum(v.calls for v in vols):,}",
            mb(sum(v.bytes for v in vols)),
            mb(sum(v.wire_bytes for v in vols)),
            mb(sum(v.wire_bytes_b for v in vols)),
            mb(sum(v.bytes for v in book.values())),
            *[f"{n.op_times_s and sum(n.op_times_s.values()):.4g}" for n in nets],
        ]
    )
    return _section("ops", "communication per step", columns, rows)


def _networks_section(pred: Prediction) -> Section:
    rows = [
        [
            n.name,
            f"{n.comm_time_s:.4g}",
            f"{n.compute_time_s:.4g}",
            f"{n.step_time_s:.4g}",
            f"{n.step_time_overlap_s:.4g}",
            f"{n.comm_share:.1%}",
            f"{speedup:.2f}x",
        ]
        for n, speedup in zip(pred.networks, pred.speedups(), strict=True)
    ]
    return _section("networks", "step time per network (slowest rank)", list(NETWORK_COLUMNS), rows)


def _section(key: str, title: str, columns: list[Column], rows: list[list[str]]) -> Section:
    table = pa.table(
        {c.key: pa.array([r[i] for r in rows], pa.string()) for i, c in enumerate(columns)}
    )
    return Section(key, title, table, columns)


def predict_document(pred: Prediction) -> Document:
    """The document of ``pred``: the job, the shown rank's calls, the step per network."""
    sections = [_ops_section(pred)]
    if pred.networks:
        sections.append(_networks_section(pred))
    return Document(
        title=_title(pred),
        intro=[_shown(pred)],
        sections=sections,
        data=pred.to_dict(),
    )
