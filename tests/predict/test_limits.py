"""Scale arguments beyond what the model computes quickly are refused before modelling."""

from __future__ import annotations

from typing import Any

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.job import ParallelDims, get_preset
from commlens.job.spec import Job
from commlens.predict.forecast import predict
from commlens.predict.limits import LIMITS, check_scale

BASE = ["predict", "--model", "gpt-125m", "--scheme", "dp"]


@pytest.fixture
def no_modelling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a prediction starts (the refusal must come first)."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model ran")

    monkeypatch.setattr("commlens.cli.predict.predict", refuse)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dp", "1000000000"], "--dp = 1,000,000,000 is above the model's limit of 131,072"),
        (
            ["--scheme", "3d", "--dp", "65536", "--tp", "4", "--pp", "2"],
            "dp·tp·pp = 524,288 is above the model's limit of 131,072",
        ),
        (["--scheme", "tp", "--tp", "100000"], "--tp = 100,000 is above"),
        (["--scheme", "pp", "--pp", "100000"], "--pp = 100,000 is above"),
        (["--layers", "100000"], "--layers = 100,000 is above the model's limit of 4,096"),
        (["--hidden", "10000000", "--heads", "1"], "--hidden = 10,000,000 is above"),
        (["--vocab", "1000000000000"], "--vocab = 1,000,000,000,000 is above"),
        (["--seq-len", "1000000000"], "--seq-len = 1,000,000,000 is above"),
        (["--micro-batch", "1000000000"], "--micro-batch = 1,000,000,000 is above"),
        (["--microbatches", "1000000000"], "--microbatches = 1,000,000,000 is above"),
        (["--gpus-per-node", "1000000"], "--gpus-per-node = 1,000,000 is above"),
        (["--nics-per-node", "1000000"], "--nics-per-node = 1,000,000 is above"),
        (["--tflops", "nan"], "--tflops must be a finite number"),
        (["--tflops", "inf"], "--tflops must be a finite number"),
        (["--tflops", "1e12"], "--tflops = 1,000,000,000,000 is above"),
        (["--micro-batch", "0"], "--micro-batch must be at least 1"),
        (["--layers", "-3"], "--layers must be at least 1"),
    ],
)
def test_oversized_argument_is_one_line_before_modelling(
    args: list[str], message: str, no_modelling: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *args]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"commlens predict: error: {message}")
    assert captured.err.count("\n") == 1


def test_library_predict_checks_the_same_bounds() -> None:
    huge = Job(
        get_preset("gpt-tiny"), "3d", ParallelDims(1 << 20, dp=1 << 17, tp=4, pp=2), seq_len=16
    )
    with pytest.raises(UsageError, match="dp·tp·pp = 1,048,576"):
        predict(huge)
    small = Job(get_preset("gpt-tiny"), "dp", ParallelDims(2), seq_len=16)
    with pytest.raises(UsageError, match="gpus-per-node"):
        predict(small, gpus_per_node=1 << 20)
    with pytest.raises(UsageError, match="tflops"):
        predict(small, tflops=float("nan"))


def test_bounds_are_inclusive() -> None:
    for name, bound in LIMITS.items():
        check_scale(name, bound.high)
        check_scale(name, bound.low)
        with pytest.raises(UsageError, match="above"):
            check_scale(name, bound.high * 2)
