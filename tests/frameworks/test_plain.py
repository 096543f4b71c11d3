"""Plain-torch jobs in the shapes of PyTorch's tensor-parallel example, Fabric's FSDP2
wrapper and Lightning's closure-driven optimizer step: op times, clocks, roles, phases,
steps and modules as a user reads them."""

from __future__ import annotations

from pathlib import Path

import commlens
from tests.distributed import run_ranks
from tests.frameworks import plain_job
from tests.frameworks.observe import holds_with_gradients, recorded_ops, rows, validated
from tests.frameworks.plain_job import STEPS

WORLD = 2


def test_tp_example_times_clock_backend_and_role(tmp_path: Path) -> None:
    got = run_ranks(plain_job.tp_job, WORLD, str(tmp_path), timeout=240)
    run = commlens.load_run(tmp_path)
    # init_device_mesh made the default group: the capture saw it start.
    assert run.manifest["backend"] == "gloo"
    for rank in range(WORLD):
        clock = run.manifest["ranks"][str(rank)]["clock"]
        assert clock["offset_ns"] == 0  # one host: one clock, whatever the ping-pong said
        assert clock.get("shared", rank == 0) and "rtt_ns" in clock
    ops = rows(
        tmp_path,
        "select rank, op, role, duration_s from events where api = 'functional' and step >= 0",
    )
    for rank in range(WORLD):
        mine = [r for r in ops if r[0] == rank]
        assert len(mine) == got[rank]["all_reduce"]  # every one, as the profiler saw
        assert {(op, role) for _, op, role, _ in mine} == {("all_reduce", "tp")}
        assert all(d > 0 for *_, d in mine)  # every all-reduce timed (its wait matched)
        # the longest is at least the profiler's longest wait on it
        assert max(d for *_, d in mine) >= max(got[rank]["wait_s"]) * 0.5


def test_fsdp2_under_a_wrapper_names_each_module_once(tmp_path: Path) -> None:
    run_ranks(plain_job.fsdp2_wrapped_job, WORLD, str(tmp_path), timeout=240)
    got = rows(
        tmp_path,
        "select distinct phase, op, module from events where rank = 0 and step >= 0 order by all",
    )
    # the wrapper's path in forward and in backward alike (FSDP2's own path: "0")
    mods = ["_original_module.0", "_original_module.2"]
    assert got == sorted(
        [("forward", "all_gather", m) for m in mods]
        + [("backward", "reduce_scatter", m) for m in mods]
        + [("backward", "all_gather", m) for m in mods]  # re-gathers in backward
    )


def test_closure_step_validation_metrics_and_tail(tmp_path: Path) -> None:
    seen = run_ranks(plain_job.closure_job, WORLD, str(tmp_path), timeout=240)
    for rank in range(WORLD):
        assert recorded_ops(tmp_path, rank) == seen[rank]
    # the validation after the last step is no step
    windows = sorted(set(commlens.load_run(tmp_path).steps_table().column("step").to_pylist()))
    assert windows == [-1, *range(STEPS)]
    got = rows(
        tmp_path,
        "select step, phase, op, dtype, count(*) from events where rank = 0 and step >= 0 "
        "group by all order by all",
    )
    for step in range(STEPS):
        mine = {(p, op, dt): n for s, p, op, dt, n in got if s == step}
        # DDP's bucket, inside optimizer.step(closure), is backward, not optimizer
        assert mine.get(("backward", "all_reduce", "float32"), 0) >= 1
        assert not [k for k in mine if k[0] == "optimizer"]
    holds_with_gradients(tmp_path, tmp_path.parent)  # metric all-reduces vary: not gradients
    code, _ = validated(tmp_path)
    assert code == 0
