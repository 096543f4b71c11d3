"""``commlens run``: refusals before any rank starts, help, and two real runs.

The runs (ranks are subprocesses) use gpt-tiny / bert-tiny with b = 2,
s = 16, fp32, and check step 1 (after one warm-up step) of every rank;
``test_signatures`` checks the other schemes the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

import commlens
from commlens.cli import run as run_cli
from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.job.models import get_preset, param_count
from commlens.job.parallel import resolve_dims
from commlens.job.spec import Job
from commlens.workloads.fit import check_fits
from tests.netem.helpers import leftovers, needs_netns

GPT = get_preset("gpt-tiny")
L, H, V = GPT.layers, GPT.hidden, GPT.vocab
B, S = 2, 16
ACT = B * S * H * 4  # one activation message b·s·h·βa
PARAM_BYTES = param_count(GPT) * 4


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(run_cli, "launch_ranks", refuse)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-tiny", "--scheme", "tp", "--nproc", "3"], "tp=3 does not divide"),
        (["--model", "gpt-tiny", "--scheme", "pp", "--nproc", "4"], "pp=4 is more than"),
        (
            [
                "--model",
                "gpt-tiny",
                "--scheme",
                "3d",
                "--nproc",
                "4",
                "--dp",
                "2",
                "--tp",
                "2",
                "--pp",
                "2",
            ],
            "does not equal the world size 4",
        ),
        (["--model", "gpt-7b", "--scheme", "dp"], "unknown model preset 'gpt-7b'"),
        (["--model", "gpt-13b", "--scheme", "dp"], "gpt-13b needs about 2"),
        (["--model", "t5-tiny", "--scheme", "pp"], "not implemented for T5"),
        (["--model", "gpt-tiny", "--scheme", "zero3", "--tp", "2"], "pure data parallelism"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--sequence-parallel"], "needs tensor"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--seq-len", "4096"], "exceeds"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--warmup-steps", "5"], "--warmup-steps"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--nodes", "3"], "multiple of --nodes 3"),
        (
            ["--model", "gpt-tiny", "--scheme", "dp", "--nodes", "2", "--link", "fast"],
            "bad link rate 'fast'",
        ),
    ],
)
def test_bad_combinations_are_refused_before_any_rank(
    args: list[str],
    message: str,
    no_launch: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "run"
    code = main(["run", *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("commlens run: error: ")
    assert message in err
    assert not out.exists()


def test_too_big_message_carries_the_estimate() -> None:
    wcfg = Job(get_preset("gpt-1.3b"), "dp", resolve_dims("dp", 2), seq_len=1024, micro_batch=2)
    with pytest.raises(UsageError, match=r"needs about \d+\.\d GB per rank \(params 5\.3"):
        check_fits(wcfg, available=10**9)
    assert check_fits(wcfg, available=10**12) > 4 * param_count(get_preset("gpt-1.3b")) * 4
    zero3 = Job(
        get_preset("gpt-1.3b"), "zero3", resolve_dims("zero3", 8), seq_len=1024, micro_batch=2
    )
    assert check_fits(zero3, available=10**12) < check_fits(wcfg, available=10**12)


def test_existing_output_is_not_overwritten(
    no_launch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    code = main(["run", "--model", "gpt-tiny", "--scheme", "dp", "--out", str(tmp_path)])
    assert code != 0 and "already exists" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--model",
        "--scheme",
        "--nproc",
        "--dp",
        "--tp",
        "--pp",
        "--seq-len",
        "--micro-batch",
        "--microbatches",
        "--dtype",
        "--recompute",
        "--schedule",
        "--sequence-parallel",
        "--steps",
        "--warmup-steps",
        "--seed",
        "--backend",
        "--out",
        "gpt-13b",
        "t5-large",
        "zero3",
        "gpipe",
    ):
        assert flag in text


# --- one real run of the installed command -------------------------------------


def per_rank(con: duckdb.DuckDBPyConnection, where: str) -> list[tuple[Any, ...]]:
    return con.sql(
        f"SELECT rank, count(*), coalesce(sum(size_bytes), 0) FROM events "
        f"WHERE step = 1 AND {where} GROUP BY rank ORDER BY rank"
    ).fetchall()


def test_installed_command_runs_dp_and_all_reduces_the_gradient_bytes(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("commlens")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            str(exe),
            "run",
            "--model",
            "gpt-tiny",
            "--scheme",
            "dp",
            "--nproc",
            "2",
            "--steps",
            "2",
            "--seq-len",
            str(S),
            "--micro-batch",
            str(B),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="120"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 measured step:" in proc.stdout and "top ops by time" in proc.stdout
    assert "all_reduce" in proc.stdout
    run = commlens.load_run(out)
    con = duckdb.connect()
    con.register("events", run.events)
    # one 25 MB DDP bucket holds all of gpt-tiny's gradients
    assert per_rank(con, "op = 'all_reduce' AND role = 'dp'") == [
        (0, 1, PARAM_BYTES),
        (1, 1, PARAM_BYTES),
    ]
    # and DDP's bucket rebuild at its second forward syncs the new layout from C++:
    # two int32 broadcasts on the same group, 120 bytes on each rank
    others = con.sql(
        "SELECT rank, op, dtype, role, count(*), sum(size_bytes) FROM events WHERE step = 1 "
        "AND NOT (op = 'all_reduce' AND role = 'dp') GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert others == [(r, "broadcast", "int32", "dp", 2, 120) for r in (0, 1)]
    # the manifest carries the workload and per-step metrics
    wl = run.manifest["workload"]
    assert wl["preset"] == "gpt-tiny" and wl["dims"] == {"world_size": 2, "dp": 2, "tp": 1, "pp": 1}
    assert wl["model"]["hidden"] == H and wl["seq_len"] == S and wl["warmup_steps"] == 1
    steps = run.manifest["steps_metrics"]
    assert [m["step"] for m in steps] == [0, 1] and [m["warmup"] for m in steps] == [True, False]
    assert all(m["loss"] > 0 and m["tflops"] > 0 and m["tokens_per_s"] > 0 for m in steps)
    assert len(run.manifest["ranks"]["1"]["meta"]["steps_metrics"]) == 2


@pytest.mark.root
@needs_netns
def test_emulated_nodes_and_link(tmp_path: Path) -> None:
    before = leftovers()
    out = tmp_path / "run"
    argv = [
        "run",
        "--model",
        "gpt-tiny",
        "--scheme",
        "dp",
        "--nproc",
        "2",
        "--nodes",
        "2",
        "--link",
        "1gbit",
        "--steps",
        "2",
        "--seq-len",
        str(S),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert leftovers() - before == set()
    run = commlens.load_run(out)
    topo = run.manifest["topology"]
    assert topo["nodes"] == 2 and topo["link_bits_per_s"] == 1e9 and run.manifest["link"] == "1gbit"
    assert (out / topo["nic_file"]).exists()
    con = duckdb.connect()
    con.register("events", run.events)
    # across the shaped link the job still all-reduces exactly its gradients
    assert per_rank(con, "op = 'all_reduce'") == [(0, 1, PARAM_BYTES), (1, 1, PARAM_BYTES)]
