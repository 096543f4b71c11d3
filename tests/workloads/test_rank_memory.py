"""Every local rank pays a torch process's memory; ``--nproc`` is bounded per host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commlens.cli import run as run_cli
from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.job.memory import (
    MAX_LOCAL_RANKS,
    PROCESS_BASELINE_BYTES,
    check_local_ranks,
    host_bytes,
)
from commlens.job.models import get_preset
from commlens.job.parallel import resolve_dims
from commlens.job.spec import Job, RunSettings
from commlens.workloads.fit import check_fits


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(run_cli, "launch_ranks", refuse)


def test_tiny_model_on_many_ranks_counts_the_process_baseline() -> None:
    tiny = Job(get_preset("gpt-tiny"), "dp", resolve_dims("dp", 200), seq_len=16, micro_batch=2)
    # The model itself is a few MB per rank; 200 torch processes are ~46 GB.
    with pytest.raises(UsageError, match=r"0\.23 GB per process, 4\d\.\d GB for 200 ranks") as err:
        check_fits(tiny, available=20 * 10**9)
    assert "start fewer ranks (--nproc)" in str(err.value)
    two = Job(get_preset("gpt-tiny"), "dp", resolve_dims("dp", 2), seq_len=16, micro_batch=2)
    assert check_fits(two, available=10**9) < PROCESS_BASELINE_BYTES


def test_host_bytes_adds_the_baseline_per_rank() -> None:
    assert host_bytes(10**9, 4) == 4 * (10**9 + PROCESS_BASELINE_BYTES)
    assert host_bytes(10**9, 4, on_gpu=True) == 4 * PROCESS_BASELINE_BYTES
    assert 150e6 < PROCESS_BASELINE_BYTES < 1e9  # a bare torch import, measured


def test_nproc_bound() -> None:
    check_local_ranks(1)
    check_local_ranks(MAX_LOCAL_RANKS)
    with pytest.raises(UsageError, match=f"at most {MAX_LOCAL_RANKS}"):
        check_local_ranks(MAX_LOCAL_RANKS + 1)
    with pytest.raises(UsageError, match="at least 1"):
        check_local_ranks(0)


@pytest.mark.parametrize(
    ("nproc", "message"),
    [
        ("2000", "--nproc 2,000 is more ranks than one host runs (at most 512"),
        ("1000000000", "--nproc 1,000,000,000 is more ranks"),
        ("0", "--nproc must be at least 1"),
        ("-4", "--nproc must be at least 1"),
    ],
)
def test_run_refuses_too_many_ranks_in_one_line(
    nproc: str, message: str, no_launch: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(
        ["run", "--model", "gpt-tiny", "--scheme", "dp", "--nproc", nproc, "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1
    assert err.startswith(f"commlens run: error: {message}")
    assert not out.exists()


def test_on_gpus_the_host_still_holds_every_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import commlens.workloads.fit as fit

    wcfg = Job(
        get_preset("gpt-tiny"),
        "dp",
        resolve_dims("dp", 8),
        seq_len=16,
        micro_batch=2,
        run=RunSettings(backend="nccl"),
    )
    monkeypatch.setattr(fit, "host_memory_available", lambda: 8 * PROCESS_BASELINE_BYTES - 1)
    with pytest.raises(UsageError, match=r"8 ranks need about 1\.8 GB of host memory"):
        check_fits(wcfg, available=10**12)  # the GPUs have room
    monkeypatch.setattr(fit, "host_memory_available", lambda: 8 * PROCESS_BASELINE_BYTES)
    assert check_fits(wcfg, available=10**12) > 0
