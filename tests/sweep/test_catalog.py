"""The catalog and the findings computed from it, on hand-made point records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main
from commlens.report.sweep import build_sweep_document, render_sweep, save_figures
from commlens.sweep import findings
from commlens.sweep.catalog import is_sweep_dir, open_catalog, write_catalog


def record(
    scheme: str,
    link: str,
    step_s: float,
    ops: dict[str, tuple[float, float]],
    seq_len: int = 32,
    status: str = "ok",
    peak: float | None = None,
) -> dict[str, Any]:
    """A point record; ``ops`` maps "op/role" to (wire bytes per rank step, share of step)."""
    dims = {"dp": (4, 1, 1), "zero3": (4, 1, 1), "tp": (1, 4, 1), "pp": (2, 1, 2)}[scheme]
    cfg = {
        "model": "gpt-tiny",
        "scheme": scheme,
        "nproc": 4,
        "dp": dims[0],
        "tp": dims[1],
        "pp": dims[2],
        "seq_len": seq_len,
        "micro_batch": 1,
        "microbatches": 1,
        "nodes": 2 if link != "loopback" else 1,
        "link": link,
        "dtype": "fp32",
        "schedule": "1f1b",
        "sequence_parallel": False,
        "recompute": False,
    }
    rid = f"{scheme}-{link}-{seq_len}"
    if status != "ok":
        return {"id": rid, "status": status, "error": "boom", "config": cfg, "network": link}
    op_rows = [
        {
            "op": key.split("/")[0],
            "role": key.split("/")[1],
            "calls_per_rank_step": 1.0,
            "bytes_per_rank_step": wire,
            "wire_bytes_per_rank_step": wire,
            "share_of_step": share,
        }
        for key, (wire, share) in ops.items()
    ]
    wire_total = sum(w for w, _ in ops.values())
    return {
        "id": rid,
        "status": "ok",
        "error": "",
        "config": cfg,
        "network": link,
        "wall_s": 1.0,
        "result": {
            "metrics": {
                "step_s": step_s,
                "comm_share": sum(s for _, s in ops.values()),
                "exposed_share": 0.1,
                "tokens_per_s": 100.0,
                "tflops_per_rank": 0.001,
                "wire_bytes_per_rank_step": wire_total,
                "peak_link_gbit_s": peak,
            },
            "ops": op_rows,
            "sizes": [
                {"op": r["op"], "size_bucket_bytes": 4096, "count": 3, "bytes": 9000}
                for r in op_rows
            ],
            "predictions": [
                {
                    "scale": "point",
                    "network": "tcp-10g",
                    "step_s": step_s / 2,
                    "comm_share": 0.1,
                    "speedup": 1.0,
                }
            ],
            "validation": {"ok": scheme != "tp", "summary": "checked", "mismatches": 0},
        },
        "scale_predictions": [
            {
                "scale": "study",
                "model": "gpt-1.3b",
                "dp": 8,
                "tp": 1,
                "pp": 1,
                "network": net,
                "step_s": 1.0 / sp,
                "comm_share": 0.5,
                "speedup": sp,
                "comm_s": 0.1,
                "compute_s": 0.1,
                "step_overlap_s": 0.1,
                "wire_bytes_per_rank_step": 1.0,
            }
            for net, sp in (("tcp-10g", 1.0), ("rdma-100g", 4.0))
        ],
    }


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    recs = [
        record("dp", "500mbit", 0.30, {"all_reduce/dp": (8e5, 0.6)}, peak=0.48),
        record("dp", "unshaped", 0.10, {"all_reduce/dp": (8e5, 0.2)}, peak=3.0),
        record("tp", "500mbit", 0.12, {"all_reduce/tp": (1e5, 0.5)}, peak=0.3),
        record("tp", "unshaped", 0.10, {"all_reduce/tp": (1e5, 0.4)}, peak=1.0),
        record("pp", "500mbit", 0.11, {"recv/pp": (1e4, 0.3), "all_reduce/pp": (1e5, 0.1)}),
        record("pp", "unshaped", 0.10, {"recv/pp": (1e4, 0.3), "all_reduce/pp": (1e5, 0.05)}),
        record("pp", "2gbit", 0.10, {}, status="failed"),
    ]
    folder = tmp_path / "sweep"  # the tests' outputs go beside it, never into what they read
    (folder / "points").mkdir(parents=True)
    (folder / "sweep.toml").write_text('[sweep]\ntitle = "hand-made"\n')
    write_catalog(folder, recs, ["tcp-10g"])
    return folder


def test_catalog_has_a_row_per_point(sweep: Path) -> None:
    assert is_sweep_dir(sweep)
    con = open_catalog(sweep)
    rows = con.execute(
        "SELECT id, status, step_s, pred_step_s_tcp_10g, volume FROM points"
    ).fetchall()
    assert len(rows) == 7 and rows[-1][1] == "failed" and rows[-1][2] is None
    assert rows[0][3] == pytest.approx(0.15)
    assert json.loads(rows[0][4]) == {"all_reduce/dp": 8e5}
    assert con.execute("SELECT count(*) FROM ops").fetchall() == [(8,)]
    assert con.execute("SELECT count(*) FROM predictions WHERE scale = 'study'").fetchall() == [
        (12,)
    ]


def test_link_findings(sweep: Path) -> None:
    con = open_catalog(sweep)
    speed = {r["scheme"]: r for r in findings.link_speedup(con).to_pylist()}
    assert speed["dp"]["speedup"] == pytest.approx(3.0)
    assert speed["dp"]["slowest_link"] == "500mbit" and speed["dp"]["fastest_link"] == "unshaped"
    assert speed["tp"]["speedup"] == pytest.approx(1.2)
    assert speed["pp"]["speedup"] == pytest.approx(1.1)  # the failed 2gbit point is left out
    shares = findings.shares_by_link(con).to_pylist()
    dp = [r for r in shares if r["scheme"] == "dp"]
    assert [r["link"] for r in dp] == ["500mbit", "unshaped"]
    assert [r["allreduce_share"] for r in dp] == [0.6, 0.2]
    pp = [r for r in shares if r["scheme"] == "pp"]
    assert pp[0]["pp_recv_share"] == 0.3 and pp[0]["embedding_allreduce_share"] == 0.1
    util = findings.link_utilization(con).to_pylist()
    assert [(u["link"], u["peak_gbit_s"]) for u in util] == [("500mbit", 0.48), ("unshaped", 3.0)]
    scale = findings.scale_predictions(con).to_pylist()
    rdma = [r for r in scale if r["network"] == "rdma-100g" and r["point_scheme"] == "dp"]
    assert rdma[0]["speedup"] == 4.0 and rdma[0]["measured_speedup"] == pytest.approx(3.0)


def test_volume_findings(tmp_path: Path) -> None:
    recs = [
        record("dp", "loopback", 0.1, {"all_reduce/dp": (1000.0, 0.1)}, seq_len=32),
        record("dp", "loopback", 0.1, {"all_reduce/dp": (1000.0, 0.1)}, seq_len=64),
        record(
            "zero3",
            "loopback",
            0.1,
            {"all_gather/dp": (1000.0, 0.1), "reduce_scatter/dp": (500.0, 0.1)},
            seq_len=32,
        ),
        record("tp", "loopback", 0.1, {"all_reduce/tp": (300.0, 0.1)}, seq_len=32),
        record("tp", "loopback", 0.1, {"all_reduce/tp": (600.0, 0.1)}, seq_len=64),
    ]
    write_catalog(tmp_path, recs, [])
    con = open_catalog(tmp_path)
    ratio = findings.zero_ratio(con).to_pylist()
    assert len(ratio) == 1 and ratio[0]["ratio_to_dp"] == pytest.approx(1.5)
    seq = {
        (r["scheme"], r["seq_len"]): r["relative_volume"]
        for r in findings.volume_vs_seq(con).to_pylist()
    }
    assert seq == {("dp", 32): 1.0, ("dp", 64): 1.0, ("tp", 32): 1.0, ("tp", 64): 2.0}
    hist = findings.size_histogram(con).to_pylist()
    assert {(h["scheme"], h["op"]) for h in hist} >= {("zero3", "all_gather"), ("tp", "all_reduce")}
    assert findings.link_speedup(con).num_rows == 0  # loopback only: no link finding


def test_report_of_a_sweep_in_every_format(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = build_sweep_document(sweep)
    keys = [s.key for s in doc.sections]
    assert keys[:4] == ["points", "link_speedup", "shares", "utilization"]
    assert "scale" in keys and "validation" in keys
    assert main(["report", str(sweep), "--width", "200"]) == 0
    text = capsys.readouterr().out
    assert "Speedup from the slowest to the fastest link" in text and "3.00x" in text
    assert "hand-made" in text and "MISMATCH" in text and "boom" in text
    html = tmp_path / "r.html"
    assert main(["report", str(sweep), "-o", str(html)]) == 0
    assert html.read_text().count("data:image/png;base64") >= 4
    out_json = tmp_path / "r.json"
    render_sweep(sweep, None, str(out_json))
    data = json.loads(out_json.read_text())
    assert data["status"] == {"ok": 6, "failed": 1}
    assert {r["scheme"] for r in data["link_speedup"]} == {"dp", "tp", "pp"}
    render_sweep(sweep, "csv", str(tmp_path / "r.csv"))
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert len(lines) == 8 and lines[0].startswith('"id","status",')
    files = save_figures(sweep, tmp_path / "fig", prefix="t-")
    assert {f.name for f in files} >= {"t-link_speedup.png", "t-shares.png", "t-scale.png"}
    assert all(f.read_bytes()[:4] == b"\x89PNG" for f in files)


def test_report_of_a_directory_without_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sweep.toml").write_text("")
    (tmp_path / "points").mkdir()
    assert main(["report", str(tmp_path)]) == 2
    assert "no catalog.duckdb" in capsys.readouterr().err


def test_sweep_report_fits_100_columns_and_words_its_link_finding(
    sweep: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["report", str(sweep)]) == 0
    text = capsys.readouterr().out
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 100
    words = " ".join(text.split())
    assert "dp: speedup 3.00x from the 500mbit link to the unshaped one" in words
    assert "gains far more" not in words  # the finding comes from the numbers, not the study
    assert "measured the largest speedup (3.00x); the others:" in words  # no runs: no noise
