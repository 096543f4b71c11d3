"""DeepSpeed ZeRO (real deepspeed, gloo on CPU): every op, and its step, phase and module."""

from __future__ import annotations

from pathlib import Path

import pytest

import commlens
from tests.distributed import run_ranks
from tests.frameworks.deepspeed_job import STEPS, job
from tests.frameworks.observe import recorded_ops, rows

pytest.importorskip("deepspeed")
WORLD = 2


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_zero_ops_land_in_their_step_phase_and_module(tmp_path: Path, stage: int) -> None:
    seen = run_ranks(job, WORLD, str(tmp_path), stage, timeout=240)
    for rank in range(WORLD):  # every op, against torch.profiler's c10d records
        assert recorded_ops(tmp_path, rank) == seen[rank]
    # deepspeed.initialize is set-up; each step holds its post-step all-gathers.
    steps = [s["step"] for s in commlens.load_run(tmp_path).manifest["ranks"]["0"]["steps"]]
    assert steps == [-1, *range(STEPS)]
    per_step = rows(
        tmp_path,
        "select step, phase, op, count(*) from events where rank = 0 and step >= 0 "
        "group by all order by all",
    )
    assert {step for step, *_ in per_step} == set(range(STEPS))  # no step the job never ran
    for step in range(STEPS):
        mine = {(phase, op) for s, phase, op, _ in per_step if s == step}
        if stage:  # updated shards, gathered inside engine.step()
            assert ("optimizer", "all_gather") in mine
        assert ("backward", "reduce_scatter" if stage == 3 else "all_reduce") in mine
        assert not {p for p, _ in mine} - {"forward", "backward", "optimizer"}
    if stage == 3:  # gathers in forward and the re-gathers in backward name their module
        mods = rows(
            tmp_path,
            "select distinct phase, module from events where rank = 0 and op = 'all_gather' "
            "and step = 0 and phase in ('forward', 'backward') order by all",
        )
        paths = ["module.blocks.0.fc", "module.blocks.1.fc", "module.head"]
        assert mods == [("backward", p) for p in paths] + [("forward", p) for p in paths]
