"""What ``commlens sweep`` and ``commlens demo`` print, as Documents for
:mod:`commlens.report`'s renderers: the points (``--list``), a line per finished
point, what one start did, and the demo's points side by side. The report of a
sweep directory is :mod:`commlens.report.sweep`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from commlens.report.document import Column, Document, Section
from commlens.sweep.catalog import CATALOG
from commlens.sweep.spread import Spread, link_findings
from commlens.units import plural

if TYPE_CHECKING:
    from commlens.sweep.grid import Point
    from commlens.sweep.runner import SweepOutcome

LIST_COLUMNS = (
    Column("n", "#", "int"),
    Column("id", "point"),
    Column("network", "network"),
    Column("skipped", "skipped"),
)
POINT_COLUMNS = (
    Column("id", "point"),
    Column("network", "network"),
    Column("status", "status"),
    Column("step_s", "step (s)", "{:.3f}"),
    Column("comm_share", "comm", "{:.0%}"),
    Column("tokens_per_s", "tokens/s", "rate"),
    Column("validate", "validate"),
    Column("error", "error"),
)


def points_document(name: str, points: Sequence[Point]) -> Document:
    """The points of the sweep ``name``, numbered, with why a point cannot run."""
    table = pa.table(
        {
            "n": pa.array(range(1, len(points) + 1), pa.int64()),
            "id": [p.id for p in points],
            "network": [p.network for p in points],
            "skipped": [p.skip_reason for p in points],
        }
    )
    return Document(
        title=f"sweep {name}: {plural(len(points), 'point')}",
        sections=[Section("points", "", table, LIST_COLUMNS)],
        data={"sweep": name, "points": table.drop_columns(["n"]).to_pylist()},
    )


def _verdict(rec: dict[str, Any]) -> str:
    """'validates', 'does not validate', or '' (not validated)."""
    val = (rec.get("result") or {}).get("validation") or {}
    return "" if not val else ("validates" if val.get("ok") else "does not validate")


def status_line(rec: dict[str, Any]) -> str:
    """One line on a point that finished (or was skipped or failed)."""
    if rec["status"] == "skipped":
        return f"skipped {rec['id']}: {rec['error']}"
    if rec["status"] == "failed":
        return f"failed  {rec['id']}: {rec['error']}"
    m = rec["result"]["metrics"]
    verdict = _verdict(rec)
    return (
        f"done    {rec['id']}: step {m['step_s']:.3f} s, "
        f"comm {m['comm_share']:.0%} of it, {m['tokens_per_s']:,.0f} tokens/s"
        + (f", link peak {m['peak_link_gbit_s']:.2f} Gbit/s" if m.get("peak_link_gbit_s") else "")
        + (f", {verdict}" if verdict else "")
    )


def outcome_document(
    name: str,
    outcome: SweepOutcome,
    report: str | None = None,
    figures: Sequence[Path] = (),
) -> Document:
    """What one start of the sweep ``name`` did: counts, every point, where things went."""
    recs = outcome.records
    metrics = [(r.get("result") or {}).get("metrics") or {} for r in recs]
    table = pa.table(
        {
            "id": [r["id"] for r in recs],
            "network": [r.get("network", "") for r in recs],
            "status": [r["status"] for r in recs],
            "step_s": pa.array([m.get("step_s") for m in metrics], pa.float64()),
            "comm_share": pa.array([m.get("comm_share") for m in metrics], pa.float64()),
            "tokens_per_s": pa.array([m.get("tokens_per_s") for m in metrics], pa.float64()),
            "validate": [_verdict(r) for r in recs],
            "error": [r.get("error") or "" for r in recs],
        }
    )
    catalog = outcome.path / CATALOG
    errors = any(table.column("error").to_pylist())
    columns = [c for c in POINT_COLUMNS if errors or c.key != "error"]  # no empty column
    notes = [f"catalog: {catalog}; see `commlens report {outcome.path}`"]
    if report:
        notes.append(f"report: {report}")
    notes += [f"figure: {file}" for file in figures]
    return Document(
        title=f"sweep {name}: {plural(len(outcome.points), 'point')} · "
        f"{len(outcome.ran)} run now · "
        f"{len(outcome.reused)} already done · {len(outcome.skipped)} skipped · "
        f"{len(outcome.failed)} failed",
        sections=[Section("points", "points", table, columns)],
        notes=notes,
        data={
            "sweep": name,
            "out": str(outcome.path),
            "ok": outcome.ok,
            "ran": outcome.ran,
            "reused": outcome.reused,
            "skipped": outcome.skipped,
            "failed": outcome.failed,
            "points": table.to_pylist(),
            "catalog": str(catalog),
            "report": report,
            "figures": [str(f) for f in figures],
        },
    )


DEMO_COLUMNS = (
    Column("scheme", "scheme"),
    Column("layout", "dp×tp×pp"),
    Column("network", "network"),
    Column("step_s", "step (s)", "{:.4f}"),
    Column("spread", "middle half (s)", align="right"),
    Column("comm_share", "comm", "{:.0%}"),
    Column("key_ops", "key ops"),
    Column("key_share", "share", "{:.0%}"),
    Column("validate", "validate"),
)


def _key_ops(scheme: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops a scheme is known by: DP's and TP's all-reduce, PP's recv and all-reduce."""
    if scheme == "pp":
        return [o for o in ops if o["role"] == "pp" and o["op"] in ("recv", "all_reduce")]
    return [o for o in ops if o["op"] == "all_reduce" and o["role"] in ("dp", "tp")]


def _row(rec: dict[str, Any], spread: Spread | None) -> dict[str, Any]:
    cfg = rec["config"]
    row: dict[str, Any] = {
        "id": rec["id"],
        "scheme": cfg["scheme"],
        "layout": f"{cfg['dp']}×{cfg['tp']}×{cfg['pp']}",
        "network": rec["network"],
        "status": rec["status"],
        "step_s": None,
        "spread": spread.band if spread else "-",
        "comm_share": None,
        "key_ops": rec["error"],
        "key_share": None,
        "validate": "-",
    }
    if rec["status"] != "ok":
        return row
    result = rec["result"]
    key = _key_ops(cfg["scheme"], result["ops"])
    val = result.get("validation") or {}
    row.update(
        step_s=result["metrics"]["step_s"],
        comm_share=result["metrics"]["comm_share"],
        key_ops=" + ".join(f"{o['op']}/{o['role']}" for o in key) or "-",
        key_share=sum(o["share_of_step"] for o in key),
        validate="ok" if val.get("ok") else "MISMATCH",
    )
    return row


def demo_document(
    records: list[dict[str, Any]],
    speedups: list[dict[str, Any]],
    html: Path,
    sweep_dir: Path,
    spreads: Mapping[str, Spread] | None = None,
) -> Document:
    """One row per point (step, the middle half of its steps, comm share, the scheme's key
    ops, validation), then the speedup of each scheme from the slowest link to the fastest
    weighed against that spread (:mod:`commlens.sweep.spread`) and where to look next."""
    spreads = spreads or {}
    rows = [_row(rec, spreads.get(rec["id"])) for rec in records]
    table = pa.Table.from_pylist(rows)
    notes = link_findings(speedups, spreads)
    if spreads:
        notes.append(
            "step = the median over the measured steps; middle half = their interquartile "
            "range, this machine's noise: a difference inside it is no finding"
        )
    notes += [
        f"HTML report: {html.resolve()}",
        f"more: `commlens report {sweep_dir}`, `commlens report {sweep_dir}/points/<point>/run`, "
        "`commlens sweep examples/study-a.toml`",
    ]
    return Document(
        title="",
        sections=[
            Section("points", "the demo's points (median step after warm-up)", table, DEMO_COLUMNS)
        ],
        notes=notes,
        data={
            "points": rows,
            "speedup": speedups,
            "spread": {k: vars(v) for k, v in spreads.items()},
            "html_report": str(html.resolve()),
            "sweep": str(sweep_dir),
        },
    )
