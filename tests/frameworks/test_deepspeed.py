"""DeepSpeed ZeRO (real deepspeed, gloo on CPU): every op, and its step, phase and module."""

from __future__ import annotations

from pathlib import Path

import pytest

import commlens
from tests.distributed import run_ranks
from tests.frameworks.deepspeed_job import STEPS, job, pipe_job
from tests.frameworks.observe import holds_with_gradients, recorded_ops, rows

pytest.importorskip("deepspeed")
WORLD = 2


@pytest.mark.parametrize(("stage", "gas", "steps"), [(0, 2, 6), (2, 2, 6), (3, 1, STEPS)])
def test_zero_ops_land_in_their_step_phase_and_module(
    tmp_path: Path, stage: int, gas: int, steps: int
) -> None:
    run = tmp_path / "run"
    got = run_ranks(job, WORLD, str(run), stage, 1, gas, steps, timeout=240)
    for rank in range(WORLD):  # every op, against torch.profiler's c10d records
        assert recorded_ops(run, rank) == got[rank][0]
    # deepspeed.initialize is set-up; one step per optimizer step (not per micro-batch,
    # though engine.step() runs after each); each holds its post-step all-gathers.
    windows = [s["step"] for s in commlens.load_run(run).manifest["ranks"]["0"]["steps"]]
    assert windows == [-1, *range(steps)]
    per_step = rows(
        run,
        "select step, phase, op, count(*) from events where rank = 0 and step >= 0 "
        "group by all order by all",
    )
    assert {step for step, *_ in per_step} == set(range(steps))  # no step the job never ran
    for step in range(steps):
        mine = {(phase, op): n for s, phase, op, n in per_step if s == step}
        if stage:  # updated shards, gathered inside engine.step()
            assert ("optimizer", "all_gather") in mine
        assert ("backward", "reduce_scatter" if stage == 3 else "all_reduce") in mine
        assert mine[("forward", "all_reduce")] == gas  # the loss, in every step
        assert not {p for p, _ in mine} - {"forward", "backward", "optimizer"}
    holds_with_gradients(run, tmp_path)
    if stage == 3:  # gathers in forward and the re-gathers in backward name their module
        mods = rows(
            run,
            "select distinct phase, module from events where rank = 0 and op = 'all_gather' "
            "and step = 0 and phase in ('forward', 'backward') order by all",
        )
        paths = ["module.blocks.0.fc", "module.blocks.1.fc", "module.head"]
        assert mods == [("backward", p) for p in paths] + [("forward", p) for p in paths]


def test_zero_plus_plus_hpz_groups_are_dp(tmp_path: Path) -> None:
    got = run_ranks(job, WORLD, str(tmp_path), 3, WORLD, timeout=240)
    events = rows(tmp_path, "select rank, pg_name, pg_ranks, role, op from events")
    for rank, (seen, groups) in enumerate(got):
        assert recorded_ops(tmp_path, rank) == seen
        # Every op on a group DeepSpeed holds (with its members), every one dp.
        want = {(name, tuple(ranks), "dp") for name, ranks in groups.values()}
        mine = [e for e in events if e[0] == rank]
        assert {(g, tuple(r), role) for _, g, r, role, _ in mine} <= want
        # The secondary partition's own group gathers parameters.
        secondary, members = groups["_ZERO_PARAM_INTRA_PARALLEL_GROUP"]
        assert secondary != groups["_WORLD_GROUP"][0] and members == list(range(WORLD))
        assert {op for _, g, *_, op in mine if g == secondary} == {"all_gather"}


def test_pipeline_engine_phases_and_roles(tmp_path: Path) -> None:
    """DeepSpeed's PipelineEngine, 2 stages x 2 replicas: every op; sends and receives by
    the instruction that issued them; every group named by the grid's axis."""
    world = 4
    got = run_ranks(pipe_job, world, str(tmp_path), timeout=300)
    for rank, (seen, _) in enumerate(got):
        assert recorded_ops(tmp_path, rank) == seen
    steps = [s["step"] for s in commlens.load_run(tmp_path).manifest["ranks"]["0"]["steps"]]
    assert steps == [-1, *range(STEPS)]  # the engine's start-up p2p is set-up
    events = rows(tmp_path, "select rank, step, phase, op, pg_name, role from events")
    for rank, (_, groups) in enumerate(got):
        mine = [e[1:] for e in events if e[0] == rank]
        want = {groups["pp"]: "pp", groups["dp"]: "dp", groups["world"]: "pp"}  # p2p on WORLD
        for _step, _phase, _op, group, role in mine:
            assert role, (rank, group)  # every group has a role
            assert want.get(group, role) == role, (rank, group, role)
        first = rank < world // 2  # stage 0 sends activations, receives gradients
        p2p = {(phase, op) for step, phase, op, *_ in mine if step >= 0 and op in ("send", "recv")}
        if first:
            assert p2p == {("forward", "send"), ("backward", "recv")}
        else:
            assert p2p == {("forward", "recv"), ("backward", "send")}
        grads = {phase for step, phase, op, g, _ in mine if step >= 0 and g == groups["dp"]
                 and op == "all_reduce"}  # fmt: skip
        assert "backward" in grads  # the replicas' gradient all-reduce
