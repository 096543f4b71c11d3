"""The subcommands in-process through main([...]), one real subprocess, one real capture."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.cli.main import main
from tests.distributed import run_ranks
from tests.report.test_formats import _Collect

DATA = Path(__file__).parent.parent / "data"


def test_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = shutil.copytree(DATA / "tiny_run", tmp_path / "a")
    assert main(["compare", str(a), str(DATA / "tiny_run"), "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "Runs (speedup relative to a)" in out
    assert out.count("1.00x") >= 2
    # per op, one column group per run, side by side
    assert "time (s) a" in out and "speedup tiny_run" in out
    row = next(line for line in out.splitlines() if line.startswith("all_reduce   dp"))
    assert row.split()[2:] == ["16,777,216", "0.026800", "16,777,216", "0.026800", "1.00x"]
    html = tmp_path / "c.html"
    assert main(["compare", str(a), str(DATA / "tiny_run"), "-o", str(html)]) == 0
    assert html.read_text().count("data:image/png;base64,") == 2
    assert main(["compare", str(a), str(a), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in data["runs"]] == ["0:a", "1:a"]
    assert all(r["speedup"] == pytest.approx(1.0) for r in data["runs"])
    assert main(["compare", str(a)]) == 2
    assert "at least two runs" in capsys.readouterr().err


def test_query(capsys: pytest.CaptureFixture[str]) -> None:
    run = str(DATA / "tiny_run")
    sql = "SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY n DESC, op"
    assert main(["query", run, sql, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["columns"] == ["op", "n"]
    assert data["rows"][0] == {"op": "all_reduce", "n": 40}
    assert main(["query", run, sql, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ['"op","n"', '"all_reduce",40']
    assert main(["query", run, "SELECT count(*) AS steps FROM steps"]) == 0
    assert capsys.readouterr().out.split() == ["steps", "─────", "8"]
    assert main(["query", run, "SELECT status, count(*) FROM ranks GROUP BY 1"]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["query", run, "SELECT nope FROM events"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commlens query: error: query failed:") and err.count("\n") == 1


def test_installed_command_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "commlens"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "commlens"]
    proc = subprocess.run(
        [*cmd, "report", str(DATA / "tiny_run"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ops"]


def _capture(rank: int, world: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    import commlens

    with commlens.capture(out):
        dist.init_process_group("gloo", rank=rank, world_size=world)
        t = torch.ones(1024)
        for _ in range(3):
            dist.all_reduce(t)
        work = dist.all_reduce(torch.ones(256), async_op=True)
        work.wait()
        dist.all_gather_into_tensor(torch.zeros(1024 * world), t)
        commlens.step()
        dist.broadcast(t, src=0)
        dist.destroy_process_group()


def test_report_of_a_real_gloo_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    run_ranks(_capture, 2, str(out))
    assert main(["report", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ops = {o["op"]: o for o in data["ops"]}
    assert ops["all_reduce"]["ranks"] == 2 and ops["all_reduce"]["count"] == 8
    assert ops["all_reduce"]["bytes"] == 2 * (3 * 4096 + 1024)
    assert ops["all_gather"]["bytes"] == 2 * 4096 * 2  # S = the gathered buffer
    assert ops["all_gather"]["pg_ranks"] == [0, 1]
    assert ops["broadcast"]["count"] == 2
    for o in data["ops"]:
        factor = {"all_reduce": 1.0, "all_gather": 0.5, "broadcast": 1.0}[o["op"]]
        assert o["busbw_GBps"] == pytest.approx(o["algbw_GBps"] * factor)
        assert o["time_s"] > 0
    assert len(data["stragglers"]) == 2
    assert {s["step"] for s in data["steps"]} == {0, 1}
    assert main(["report", str(out)]) == 0
    assert "Communication by op and process group" in capsys.readouterr().out


def test_step_range(capsys: pytest.CaptureFixture[str]) -> None:
    from commlens.cli.report import parse_steps

    assert parse_steps("1:") == (1, None)
    assert parse_steps(":3") == (None, 3)
    assert parse_steps("2") == (2, 3)
    assert parse_steps("1:4") == (1, 4)
    run = str(DATA / "tiny_run")
    assert main(["report", run, "--format", "json", "--steps", "1:"]) == 0
    data = json.loads(capsys.readouterr().out)
    dp = next(o for o in data["ops"] if o["op"] == "all_reduce" and o["role"] == "dp")
    assert dp["count"] == 8  # 2 buckets x 4 ranks, step 1 only
    assert [s["step"] for s in data["steps"]] == [1]
    assert {t["step"] for t in data["throughput"]} == {1}
    assert all(s["instances"] == 6 for s in data["stragglers"])
    assert main(["compare", run, run, "--steps", ":1", "--format", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["steps"] for r in runs] == [1, 1]
    for bad in ("x", "3:1", "1:b"):
        with pytest.raises(SystemExit):
            main(["report", run, "--steps", bad])
    assert "not a step range" in capsys.readouterr().err


VALIDATED_RUN = str(DATA.parent / "predict" / "data" / "gpt-tiny-pp-1f1b")


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["validate", VALIDATED_RUN], "measured vs predicted, per op and role"),
        (["net", "list"], "network profiles (built-in)"),
        (["net", "show", "rdma-100g"], "network profile rdma-100g"),
    ],
)
def test_every_command_renders_md_html_and_json(
    argv: list[str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert text in plain
    assert main([*argv, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# ") and text in md
    assert main([*argv, "--format", "html"]) == 0
    html = capsys.readouterr().out
    assert html.startswith("<!DOCTYPE html>") and text in html
    parser = _Collect()  # every tag closed
    parser.feed(html)
    assert parser.stack == []
    assert main([*argv, "--format", "json"]) == 0
    json.loads(capsys.readouterr().out)


def test_validate_prints_the_verdict_and_json_is_the_validation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", VALIDATED_RUN]) == 0
    out = capsys.readouterr().out
    assert "gpt-tiny pp dp=1 tp=1 pp=2  s=32 b=2 k=4 fp32" in out
    assert "steps held: 0..2" in out and "tolerance: 1.00%" in out
    row = next(line for line in out.splitlines() if line.startswith("all_reduce"))
    assert row.split()[:9] == [
        "all_reduce",
        "pp",
        "6",
        "6",
        "6",
        "786,432",
        "786,432",
        "0.000%",
        "ok",
    ]
    assert out.rstrip().endswith("validate: the run matches the model")
    assert main(["validate", VALIDATED_RUN, "--format", "md"]) == 0
    assert (
        "| all_reduce | pp | 6 | 6 | 6 | 786,432 | 786,432 | 0.000% | ok |"
        in capsys.readouterr().out
    )
    assert main(["validate", VALIDATED_RUN, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["ok", "job", "tolerance", "steps", "ranks", "ops", "mismatches", "notes"]
    assert data["steps"] == [0, 1, 2] and data["ranks"] == [0, 1]


def test_net_list_json_is_the_list_of_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    from commlens.predict.profiles import builtin_profiles

    assert main(["net", "list", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [p.to_dict() for p in builtin_profiles()]
    assert main(["net", "list"]) == 0
    row = next(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("rdma-100g")
    )
    assert row.split()[:6] == ["rdma-100g", "inter", "2.00", "100", "0.90", "90"]


def test_report_csv_writes_the_table_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import csv

    run = str(DATA / "tiny_run")
    assert main(["report", run, "--format", "csv"]) == 0  # default: the by-size table
    header = next(csv.reader(capsys.readouterr().out.splitlines()))
    assert header[:6] == ["op", "pg_name", "pg_ranks", "group_size", "role", "size_bucket_bytes"]
    for table, first in (("steps", "step"), ("ops", "op"), ("skew", "op"), ("ranks", "rank")):
        out = tmp_path / f"{table}.csv"
        assert main(["report", run, "--format", "csv", "--table", table, "-o", str(out)]) == 0
        rows = list(csv.DictReader(out.read_text().splitlines()))
        assert rows and next(iter(rows[0])) == first
    steps = list(csv.DictReader((tmp_path / "steps.csv").read_text().splitlines()))
    assert [r["step"] for r in steps] == ["0", "1"]
    ops = list(csv.DictReader((tmp_path / "ops.csv").read_text().splitlines()))
    assert {"service_s", "queue_s", "peer_wait_s", "transfer_s"} <= set(ops[0])
    with pytest.raises(SystemExit):
        main(["report", run, "--format", "csv", "--table", "nope"])
    assert "invalid choice" in capsys.readouterr().err
