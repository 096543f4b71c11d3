"""What ``commlens demo`` prints at the end: its points side by side and the link speedups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.report.document import Column, Document, Section

COLUMNS = (
    Column("scheme", "scheme"),
    Column("layout", "dp×tp×pp"),
    Column("network", "network"),
    Column("step_s", "step (s)", "{:.4f}"),
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


def _row(rec: dict[str, Any]) -> dict[str, Any]:
    cfg = rec["config"]
    row: dict[str, Any] = {
        "id": rec["id"],
        "scheme": cfg["scheme"],
        "layout": f"{cfg['dp']}×{cfg['tp']}×{cfg['pp']}",
        "network": rec["network"],
        "status": rec["status"],
        "step_s": None,
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
    records: list[dict[str, Any]], speedups: list[dict[str, Any]], html: Path, sweep_dir: Path
) -> Document:
    """One row per point (step, comm share, the scheme's key ops, validation), then the
    speedup of each scheme from the slowest link to the fastest and where to look next."""
    rows = [_row(rec) for rec in records]
    table = pa.Table.from_pylist(rows)
    notes = [
        f"{s['scheme']}: speedup {s['speedup']:.2f}x from the {s['slowest_link']} link "
        f"to the {s['fastest_link']} one (best step {s['slowest_step_s']:.4f} s → "
        f"{s['fastest_step_s']:.4f} s)"
        for s in speedups
    ]
    notes += [
        f"HTML report: {html.resolve()}",
        f"more: `commlens report {sweep_dir}`, `commlens report {sweep_dir}/points/<point>/run`, "
        "`commlens sweep examples/study-a.toml`",
    ]
    return Document(
        title="",
        sections=[
            Section("points", "the demo's points (median step after warm-up)", table, COLUMNS)
        ],
        notes=notes,
        data={
            "points": rows,
            "speedup": speedups,
            "html_report": str(html.resolve()),
            "sweep": str(sweep_dir),
        },
    )
