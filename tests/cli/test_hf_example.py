"""The README's framework job: examples/hf_trainer.py traced unchanged under torchrun."""

from __future__ import annotations

import runpy
import subprocess
import sysconfig
from pathlib import Path

import pytest

from commlens.analysis import open_run, step_table
from commlens.analysis.breakdown import phase_table

pytest.importorskip("transformers")

EXAMPLE = Path(__file__).parents[2] / "examples" / "hf_trainer.py"
SCRIPTS = Path(sysconfig.get_path("scripts"))


def test_trainer_example_traces_with_steps_roles_and_backward_buckets(tmp_path: Path) -> None:
    out = tmp_path / "hf"
    cmd = [str(SCRIPTS / "commlens"), "trace", "--out", str(out), "--"]
    cmd += [str(SCRIPTS / "torchrun"), "--standalone", "--nproc_per_node", "2", str(EXAMPLE), "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open_run(out) as view:
        steps = {r["step"] for r in step_table(view).to_pylist()}
        assert {0, 1} <= steps <= {-1, 0, 1, 2}  # set-up, two steps, maybe a tail
        roles = view.sql("SELECT DISTINCT pg_name, role FROM events").to_pylist()
        assert roles == [{"pg_name": "0", "role": "dp"}]  # one group, one role all run
        phases = {r["phase"]: r["count"] for r in phase_table(view).to_pylist()}
        per_step = view.sql(
            "SELECT step, sum(size_bytes) AS bytes FROM events WHERE op = 'all_reduce' "
            "AND phase = 'backward' AND step >= 0 AND rank = 0 GROUP BY step ORDER BY step"
        ).to_pylist()
    assert phases.get("backward", 0) > 0
    # one synced micro-batch per step (accumulation 2): DDP's buckets hold every fp32
    # gradient once (the tied embedding once), plus the int32 map of used parameters
    # that DDP all-reduces with find_unused_parameters (the Trainer's default)
    numel, tensors = _parameters()
    assert [int(r["bytes"]) for r in per_step] == [4 * numel + 4 * tensors] * len(per_step)
    assert per_step


def _parameters() -> tuple[int, int]:
    """Parameters (elements, tensors) of the example's own model."""
    from transformers import GPT2LMHeadModel

    config = runpy.run_path(str(EXAMPLE))["model_config"]()
    params = list(GPT2LMHeadModel(config).parameters())
    return sum(p.numel() for p in params), len(params)
