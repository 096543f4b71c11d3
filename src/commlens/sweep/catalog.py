"""The sweep directory and its DuckDB catalog.

::

    SWEEP/sweep.toml              the sweep file as last run
    SWEEP/points/ID/run/          the point's run (commlens run --out)
    SWEEP/points/ID/run.log       what commlens run printed
    SWEEP/points/ID/point.json    status, error, figures (written last, atomically)
    SWEEP/catalog.duckdb          rebuilt from the point.json files after every point

Catalog tables (one row per point in ``points``; the others keyed by ``id``):

- ``points``: status (ok/failed/skipped/pending), error, the point's config,
  step_s, comm_share, exposed_share, tokens_per_s, tflops_per_rank, bytes and
  wire bytes per rank per step, peak/mean link Gbit/s, validate_ok and its
  summary, ``volume`` (JSON: wire bytes per rank per step by "op/role"), and
  ``pred_step_s_<network>`` per predicted profile;
- ``ops``: per (point, op, role) calls, bytes, wire bytes, time per step and
  its share of the mean step, and for collectives the share in transfer (after
  the last peer arrived; the rest is waiting for it);
- ``sizes``: per (point, op, log2 size bucket) message counts and bytes;
- ``predictions``: per (point, scale, network) the model's step and comm time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from commlens.errors import UsageError
from commlens.safefile import META_LIMIT, check_within, read_json, replacing, write_output
from commlens.trace.rundir import first_foreign, foreign_in_run, remove_entries

CATALOG = "catalog.duckdb"
SPEC_FILE = "sweep.toml"
POINTS_DIR = "points"
POINT_FILE = "point.json"

STATUSES = ("ok", "failed", "skipped", "pending")


def is_sweep_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / SPEC_FILE).is_file() and ((p / POINTS_DIR).is_dir() or (p / CATALOG).is_file())


def point_dir(sweep: Path, point_id: str) -> Path:
    """The point's directory; a UsageError if it would lie outside ``sweep/points``."""
    pdir = sweep / POINTS_DIR / point_id
    if Path(point_id).name != point_id or point_id in ("", ".", ".."):
        raise UsageError(f"{sweep}: point id {point_id!r} is not a plain name")
    check_within(pdir, sweep / POINTS_DIR)
    return pdir


def write_json(path: Path, data: dict[str, Any], within: Path | None = None) -> None:
    """Write ``data`` whole or not at all (under ``within``, if given)."""
    write_output(path, json.dumps(data, indent=1, default=str), within=within or path.parent)


_OWN_POINT_FILES = re.compile(r"^(point\.json|run\.log|\.point\.json\.[0-9a-f.]+\.tmp)$")
_OWN_SWEEP_FILES = re.compile(
    rf"^({re.escape(SPEC_FILE)}|{re.escape(CATALOG)}|\.lock"
    rf"|\.({re.escape(SPEC_FILE)}|{re.escape(CATALOG)})\.[0-9a-f.]+\.tmp(\.wal)?)$"
)


def _foreign_in_point(entry: Path) -> Path | None:
    if entry.is_symlink():
        return entry
    if entry.is_dir():
        return first_foreign(entry, foreign_in_run) if entry.name == "run" else entry
    return None if entry.is_file() and _OWN_POINT_FILES.match(entry.name) else entry


def _foreign_in_points(entry: Path) -> Path | None:
    if entry.is_symlink() or not entry.is_dir():
        return entry
    return first_foreign(entry, _foreign_in_point)


def _foreign_in_sweep(entry: Path) -> Path | None:
    if entry.is_symlink():
        return entry
    if entry.is_dir():
        return first_foreign(entry, _foreign_in_points) if entry.name == POINTS_DIR else entry
    return None if entry.is_file() and _OWN_SWEEP_FILES.match(entry.name) else entry


def clear_sweep(sweep: Path) -> None:
    """Remove the sweep directory's contents, all of them commlens's own files.

    Refuses (one line, naming the entry) a directory that is not a sweep or
    holds anything a sweep does not write; then nothing is removed.
    """
    if not is_sweep_dir(sweep):
        raise UsageError(f"{sweep} is not a commlens sweep directory; refusing to remove it")
    remove_entries(sweep, _foreign_in_sweep)


def read_point(sweep: Path, point_id: str) -> dict[str, Any] | None:
    """The point's record, or None when it never finished (or its file is damaged)."""
    path = point_dir(sweep, point_id) / POINT_FILE
    try:
        data = read_json(path, limit=META_LIMIT, follow=False)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("status") in STATUSES else None


def column_name(network: str) -> str:
    return "pred_step_s_" + re.sub(r"[^0-9a-zA-Z]+", "_", network).strip("_").lower()


_POINT_METRICS = (
    "step_s",
    "step_mean_s",
    "step_min_s",
    "comm_s",
    "comm_share",
    "exposed_share",
    "tokens_per_s",
    "tflops_per_rank",
    "bytes_per_step",
    "bytes_per_rank_step",
    "wire_bytes_per_rank_step",
    "calls_per_rank_step",
    "peak_link_gbit_s",
    "mean_link_gbit_s",
)


def _point_row(rec: dict[str, Any], networks: list[str]) -> dict[str, Any]:
    result = rec.get("result") or {}
    metrics = result.get("metrics") or {}
    validation = result.get("validation") or {}
    row: dict[str, Any] = {
        "id": rec["id"],
        "status": rec["status"],
        "error": rec.get("error") or "",
        **rec["config"],
        "network": rec.get("network", ""),
        "wall_s": rec.get("wall_s"),
    }
    for key in _POINT_METRICS:
        value = metrics.get(key)
        row[key] = float(value) if value is not None else None
    row["validate_ok"] = validation.get("ok") if validation else None
    row["validate_summary"] = validation.get("summary", "")
    volume = {
        f"{o['op']}/{o['role'] or '-'}": o["wire_bytes_per_rank_step"]
        for o in result.get("ops", [])
    }
    row["volume"] = json.dumps(volume, sort_keys=True)
    preds = {
        p["network"]: p["step_s"] for p in result.get("predictions", []) if p["scale"] == "point"
    }
    for net in networks:
        row[column_name(net)] = preds.get(net)
    return row


def build_tables(records: list[dict[str, Any]], networks: list[str]) -> dict[str, pa.Table]:
    """The catalog's tables from the point records (in grid order)."""
    points = [_point_row(r, networks) for r in records]
    long: dict[str, list[dict[str, Any]]] = {"ops": [], "sizes": [], "predictions": []}
    for rec in records:
        result = rec.get("result") or {}
        for name in long:
            long[name] += [{"id": rec["id"], **row} for row in result.get(name, [])]
        for row in long["ops"]:  # shares as collected (commlens.analysis.opshare)
            row.setdefault("transfer_share", None)
        for row in rec.get("scale_predictions", []):
            long["predictions"].append({"id": rec["id"], **row})
    tables = {"points": _typed(_from_rows(points))}
    for name, rows in long.items():
        tables[name] = _typed(_from_rows(rows)) if rows else _EMPTY[name]
    return tables


def _from_rows(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows with possibly different keys: every key a column (None where missing)."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows])


_NULL_TYPES = {"validate_ok": pa.bool_(), "error": pa.string(), "validate_summary": pa.string()}


def _typed(table: pa.Table) -> pa.Table:
    """Columns that are all None get a real type (float64 unless known)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_null(f.type):
            kind = _NULL_TYPES.get(f.name, pa.float64())
            table = table.set_column(i, f.name, pa.nulls(table.num_rows, kind))
    return table


_EMPTY = {
    "ops": pa.table(
        {
            "id": pa.array([], pa.string()),
            "op": pa.array([], pa.string()),
            "role": pa.array([], pa.string()),
            "calls_per_rank_step": pa.array([], pa.float64()),
            "bytes_per_rank_step": pa.array([], pa.float64()),
            "wire_bytes_per_rank_step": pa.array([], pa.float64()),
            "time_per_step_s": pa.array([], pa.float64()),
            "share_of_step": pa.array([], pa.float64()),
            "transfer_share": pa.array([], pa.float64()),
        }
    ),
    "sizes": pa.table(
        {
            "id": pa.array([], pa.string()),
            "op": pa.array([], pa.string()),
            "size_bucket_bytes": pa.array([], pa.int64()),
            "count": pa.array([], pa.int64()),
            "bytes": pa.array([], pa.int64()),
        }
    ),
    "predictions": pa.table(
        {
            "id": pa.array([], pa.string()),
            "scale": pa.array([], pa.string()),
            "model": pa.array([], pa.string()),
            "dp": pa.array([], pa.int64()),
            "tp": pa.array([], pa.int64()),
            "pp": pa.array([], pa.int64()),
            "network": pa.array([], pa.string()),
            "step_s": pa.array([], pa.float64()),
            "comm_share": pa.array([], pa.float64()),
            "speedup": pa.array([], pa.float64()),
        }
    ),
}


def write_catalog(sweep: Path, records: list[dict[str, Any]], networks: list[str]) -> Path:
    """(Re)write ``catalog.duckdb`` atomically; return its path."""
    tables = build_tables(records, networks)
    final = sweep / CATALOG
    with replacing(final, within=sweep) as tmp:
        con = duckdb.connect(str(tmp))
        try:
            for name, table in tables.items():
                con.register(f"arrow_{name}", table)
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM arrow_{name}")
                con.unregister(f"arrow_{name}")
            con.execute("CHECKPOINT")
        finally:
            con.close()
    return final


def open_catalog(sweep: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the sweep's catalog."""
    from commlens.errors import RunFormatError

    path = Path(sweep) / CATALOG
    if not path.is_file():
        raise RunFormatError(f"{sweep}: no {CATALOG}; run `commlens sweep` on it first")
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise RunFormatError(f"{path}: not a readable DuckDB catalog ({exc})") from None
