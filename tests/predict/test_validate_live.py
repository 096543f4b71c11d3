"""commlens run, then commlens validate, on real gloo ranks (the whole path, once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlens.cli.main import main


@pytest.mark.timeout(600)
def test_run_then_validate_zero3_with_padded_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 ranks: the vocabulary (512) and positions (128) do not divide by 3, so FSDP pads
    out = tmp_path / "run"
    code = main(
        [
            "run",
            "--model",
            "gpt-tiny",
            "--scheme",
            "zero3",
            "--nproc",
            "3",
            "--seq-len",
            "16",
            "--micro-batch",
            "1",
            "--microbatches",
            "2",
            "--steps",
            "2",
            "--warmup-steps",
            "0",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    capsys.readouterr()
    assert main(["validate", str(out), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["steps"] == [0, 1] and result["ranks"] == [0, 1, 2]
    ops = {(o["op"], o["role"]): o for o in result["ops"]}
    assert set(ops) == {("all_gather", "dp"), ("reduce_scatter", "dp")}
    # forward + backward gathers of every unit, twice as many as the reduce-scatters
    assert (
        ops["all_gather", "dp"]["measured_calls"]
        == 2 * ops["reduce_scatter", "dp"]["measured_calls"]
    )
