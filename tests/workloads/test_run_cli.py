"""``commlens run``: refusals before any rank starts, help, and captured signatures.

The signature tests run the real command (ranks are subprocesses) on
gpt-tiny (L = 2, h = 64, V = 512) with b = 2, s = 16, fp32, and check step 1
(after one warm-up step) of every rank against REFERENCE.md §2.
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
from commlens.spec.models import get_preset, param_count
from commlens.workloads.config import WorkloadConfig, resolve_dims
from commlens.workloads.fit import check_fits

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
    wcfg = WorkloadConfig(get_preset("gpt-1.3b"), "dp", resolve_dims("dp", 2), seq_len=1024)
    with pytest.raises(UsageError, match=r"needs about \d+\.\d GB per rank \(params 5\.3"):
        check_fits(wcfg, available=10**9)
    assert check_fits(wcfg, available=10**12) > 4 * param_count(get_preset("gpt-1.3b")) * 4
    zero3 = WorkloadConfig(get_preset("gpt-1.3b"), "zero3", resolve_dims("zero3", 8), seq_len=1024)
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


# --- captured signatures -------------------------------------------------------


def run_and_load(tmp_path: Path, *args: str) -> tuple[Any, duckdb.DuckDBPyConnection]:
    out = tmp_path / "run"
    argv = [
        "run",
        "--model",
        "gpt-tiny",
        "--nproc",
        "2",
        "--steps",
        "2",
        "--warmup-steps",
        "1",
        "--seq-len",
        str(S),
        "--micro-batch",
        str(B),
        "--out",
        str(out),
        *args,
    ]
    assert main(argv) == 0
    run = commlens.load_run(out)
    con = duckdb.connect()
    con.register("events", run.events)
    return run, con


def per_rank(con: duckdb.DuckDBPyConnection, where: str) -> list[tuple[Any, ...]]:
    return con.sql(
        f"SELECT rank, count(*), coalesce(sum(size_bytes), 0) FROM events "
        f"WHERE step = 1 AND {where} GROUP BY rank ORDER BY rank"
    ).fetchall()


def test_dp_all_reduces_exactly_the_gradient_bytes(tmp_path: Path) -> None:
    run, con = run_and_load(tmp_path, "--scheme", "dp")
    assert per_rank(con, "op = 'all_reduce' AND role = 'dp'") == [
        (0, 1, PARAM_BYTES),
        (1, 1, PARAM_BYTES),  # one 25 MB bucket holds all of gpt-tiny
    ]
    assert per_rank(con, "NOT (op = 'all_reduce' AND role = 'dp')") == []
    # the manifest carries the workload and per-step metrics
    wl = run.manifest["workload"]
    assert wl["preset"] == "gpt-tiny" and wl["dims"] == {"world_size": 2, "dp": 2, "tp": 1, "pp": 1}
    assert wl["model"]["hidden"] == H and wl["seq_len"] == S and wl["warmup_steps"] == 1
    steps = run.manifest["steps_metrics"]
    assert [m["step"] for m in steps] == [0, 1] and [m["warmup"] for m in steps] == [True, False]
    assert all(m["loss"] > 0 and m["tflops"] > 0 and m["tokens_per_s"] > 0 for m in steps)
    assert len(run.manifest["ranks"]["1"]["meta"]["steps_metrics"]) == 2


def test_tp_four_all_reduces_per_layer_of_b_s_h(tmp_path: Path) -> None:
    _, con = run_and_load(tmp_path, "--scheme", "tp")
    assert per_rank(con, "role <> 'tp'") == []
    for phase in ("forward", "backward"):
        # 2 per layer, plus the embedding (forward) or the LM-head input (backward)
        got = per_rank(con, f"op = 'all_reduce' AND size_bytes = {ACT} AND phase = '{phase}'")
        assert got == [(r, 2 * L + 1, (2 * L + 1) * ACT) for r in (0, 1)]
    # the vocab-parallel loss: max, target logit and sum of exponentials, one float per token
    assert per_rank(con, f"op = 'all_reduce' AND size_bytes = {B * S * 4}") == [
        (r, 3, 3 * B * S * 4) for r in (0, 1)
    ]
    assert per_rank(con, "op <> 'all_reduce'") == []


def test_tp_sequence_parallel_gathers_and_scatters(tmp_path: Path) -> None:
    _, con = run_and_load(tmp_path, "--scheme", "tp", "--sequence-parallel")
    for op in ("all_gather", "reduce_scatter"):
        assert per_rank(con, f"op = '{op}' AND size_bytes = {ACT}") == [
            (r, 4 * L + 2, (4 * L + 2) * ACT) for r in (0, 1)
        ]
    # the loss scalars and one all-reduce of the norms' partial gradients
    assert [n for _, n, _ in per_rank(con, "op = 'all_reduce'")] == [4, 4]


def test_pp_sends_activations_and_all_reduces_the_embedding(tmp_path: Path) -> None:
    k = 2
    _, con = run_and_load(tmp_path, "--scheme", "pp", "--microbatches", str(k))
    for op in ("send", "recv"):
        rows = con.sql(
            f"SELECT rank, peer, count(*), sum(size_bytes) FROM events WHERE step = 1 "
            f"AND op = '{op}' AND role = 'pp' GROUP BY ALL ORDER BY rank"
        ).fetchall()
        assert rows == [(0, 1, k, k * ACT), (1, 0, k, k * ACT)]
    embed = con.sql(
        "SELECT rank, pg_ranks, size_bytes FROM events WHERE step = 1 AND op = 'all_reduce'"
    ).fetchall()
    assert sorted(embed) == [(0, [0, 1], V * H * 4), (1, [0, 1], V * H * 4)]


@pytest.mark.parametrize(("scheme", "gathers"), [("zero3", 2), ("zero2", 1)])
def test_zero_gathers_and_scatters_the_parameters(
    scheme: str, gathers: int, tmp_path: Path
) -> None:
    # zero3 gathers before forward and again before backward; zero2 keeps them for backward
    _, con = run_and_load(tmp_path, "--scheme", scheme)
    for op, times in (("all_gather", gathers), ("reduce_scatter", 1)):
        rows = per_rank(con, f"op = '{op}' AND role = 'dp'")
        assert [r for r, _, _ in rows] == [0, 1]
        for rank, _, nbytes in rows:
            assert nbytes == pytest.approx(times * PARAM_BYTES, rel=0.05), (op, rank)


def test_installed_command_runs_zero1(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("commlens")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            str(exe),
            "run",
            "--model",
            "bert-tiny",
            "--scheme",
            "zero1",
            "--nproc",
            "2",
            "--steps",
            "2",
            "--seq-len",
            str(S),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="120"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "measured steps" in proc.stdout and "top ops by time" in proc.stdout
    con = duckdb.connect()
    con.register("events", commlens.load_run(out).events)
    bert = param_count(get_preset("bert-tiny")) * 4
    # ZeroRedundancyOptimizer: DDP's full all-reduce, then each owner broadcasts its parameters
    assert per_rank(con, "op = 'all_reduce'") == [(0, 1, bert), (1, 1, bert)]
    broadcast = per_rank(con, "op = 'broadcast'")
    assert [nbytes for _, _, nbytes in broadcast] == [bert, bert]
