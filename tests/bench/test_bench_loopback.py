"""``commlens bench`` on real gloo ranks over loopback (no root needed)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.bench.names import OPS
from commlens.bench.runner import BenchConfig, run_bench
from commlens.cli import bench as bench_cli
from commlens.errors import UsageError
from commlens.optable import bus_factor
from commlens.report.bench import CSV_COLUMNS, bench_document
from commlens.report.formats import get_renderer


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    cfg = BenchConfig(ops=list(OPS), sizes=[8, 4096, 1 << 18], nproc=3, warmup=1, iters=5)
    seen: list[dict[str, object]] = []
    rep = run_bench(cfg, on_row=seen.append)
    rep.seen = seen  # type: ignore[attr-defined]
    return rep


def test_every_op_and_size_runs_and_is_correct(report) -> None:  # type: ignore[no-untyped-def]
    assert len(report.rows) == len(OPS) * 3
    assert report.seen == report.rows  # the progress callback saw every row, in order
    skipped = [(r["op"], r["size_bytes"]) for r in report.rows if "skipped" in r]
    # 8 bytes = 2 floats cannot be split over 3 ranks.
    assert sorted(skipped) == [("all_gather", 0), ("all_to_all", 0), ("reduce_scatter", 0)]
    for row in report.measured:
        assert row["ok"], row
        assert row["ranks"] == 3 and row["iters"] == 5
        assert row["time_min_s"] <= row["time_p50_s"] <= row["time_max_s"]
        assert row["time_min_s"] <= row["time_mean_s"] <= row["time_max_s"]
        assert row["time_p50_s"] <= row["time_p99_s"] <= row["time_max_s"]
        assert row["algbw_GB/s"] == pytest.approx(row["size_bytes"] / row["time_mean_s"] / 1e9)
        factor = bus_factor(row["op"], 3)
        assert row["busbw_GB/s"] == pytest.approx(row["algbw_GB/s"] * factor)
        assert row["busbw_Gbit/s"] == pytest.approx(row["busbw_GB/s"] * 8)
    gathered = [r for r in report.measured if r["op"] == "all_gather"]
    assert [r["size_bytes"] for r in gathered] == [4092, (1 << 18) - 4]  # multiples of 3 floats


def test_csv_json_and_table(report) -> None:  # type: ignore[no-untyped-def]
    doc = bench_document(report)
    rows = list(csv.DictReader(io.StringIO(get_renderer("csv").render(doc))))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert len(rows) == len(report.measured)
    data = json.loads(get_renderer("json").render(doc))
    assert data["config"]["nproc"] == 3 and len(data["results"]) == len(report.rows)
    table = doc.section("results").table
    assert table.num_rows == len(report.rows)


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="commlens")
    bench_cli.register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    return int(args.func(args))


def test_cli_writes_csv_and_json(tmp_path: Path) -> None:
    out = tmp_path / "b.csv"
    common = ["--ops", "all_reduce,broadcast", "--sizes", "1K,64K", "--iters", "3", "--warmup", "1"]
    assert _cli(*common, "--format", "csv", "-o", str(out)) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["op"], r["size_bytes"]) for r in rows] == [
        ("all_reduce", "1024"),
        ("all_reduce", "65536"),
        ("broadcast", "1024"),
        ("broadcast", "65536"),
    ]
    assert all(r["ok"] == "True" for r in rows)


def test_cli_text_table_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("--ops", "all_reduce", "--sizes", "1K", "--iters", "2", "--warmup", "0") == 0
    out = capsys.readouterr().out
    assert "busbw (GB/s)" in out and "all_reduce" in out and "1K" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--ops", "allreduce"],
        ["--dtype", "complex"],
        ["--nproc", "3", "--nodes", "2"],
        ["--sizes", "9:1"],
        ["--fit", "out.txt"],
        ["--iters", "0"],
    ],
)
def test_cli_bad_input_is_one_line(argv: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        _cli(*argv)
    assert "\n" not in str(err.value)


def test_loopback_needs_no_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    rep = run_bench(BenchConfig(ops=["all_reduce"], sizes=[1024], nproc=2, warmup=0, iters=2))
    assert rep.measured[0]["ok"] and rep.topology is None


def test_link_without_root_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError) as err:
        _cli("--nodes", "2", "--link", "1gbit", "--sizes", "1K")
    assert "\n" not in str(err.value) and "root" in str(err.value)


def test_nccl_without_gpus_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as err:
        _cli("--backend", "nccl", "--sizes", "1K")
    assert "\n" not in str(err.value) and "CUDA" in str(err.value)


def test_installed_command_runs(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    cmd = [
        str(Path(sys.executable).with_name("commlens")),
        "bench",
        "--sizes",
        "4K",
        "--iters",
        "2",
        "--warmup",
        "0",
        "--format",
        "json",
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["results"][0]["op"] == "all_reduce" and data["results"][0]["ok"]


def test_main_reports_bad_input_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from commlens.cli.main import main

    assert main(["bench", "--sizes", "lots"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("commlens bench: error:")
