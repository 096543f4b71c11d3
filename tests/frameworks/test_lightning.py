"""The Lightning Trainer (DDP, gradient accumulation, sync_dist metrics, end-of-fit
validation), launched by Lightning itself and by torchrun under ``commlens trace``,
and a nanoGPT-style script: every op against torch.profiler, steps = optimizer steps,
phases, modules, op times, clocks, and validate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import commlens
from tests.distributed import run_ranks
from tests.frameworks import lightning_job, nanogpt_job
from tests.frameworks.observe import holds_with_gradients, recorded_ops, rows

pytest.importorskip("lightning")
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMMLENS = shutil.which("commlens", path=str(BIN)) or "commlens"
WORLD = 2


def _traced(run: Path, work: Path, launch: list[str]) -> None:
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    cmd = [COMMLENS, "trace", "--out", str(run), "--", *launch]
    cmd += ["-m", "tests.frameworks.lightning_job", str(work)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _same_as_profiler(run: Path, work: Path) -> int:
    """Every op of the fit as the profiler saw it; the optimizer steps."""
    steps = set()
    for rank in range(WORLD):
        seen = json.loads((work / f"profiled-{rank}.json").read_text())
        t0, t1 = seen["t_ns"]  # the profiler's span (one host: no clock moves)
        ours = dict(rows(run, f"select op, count(*) from events where rank = {rank} "
                              f"and t_issue_ns between {t0} and {t1} group by op"))  # fmt: skip
        assert ours == seen["ops"], (rank, ours, seen)
        steps.add(seen["steps"])
    (n,) = steps
    return int(n)


def _holds(run: Path, tmp: Path) -> None:
    steps = n_steps = _same_as_profiler(run, tmp / "work")
    assert steps == lightning_job.STEPS
    windows = sorted(set(commlens.load_run(run).steps_table().column("step").to_pylist()))
    assert windows == [-1, *range(n_steps)]  # the end-of-fit validation is no step
    got = rows(
        run,
        "select step, phase, op, count(*) from events where rank = 0 and step >= 0 "
        "group by all order by all",
    )
    for step in range(n_steps):  # DDP's buckets inside optimizer.step(closure): backward
        mine = {(p, op): n for s, p, op, n in got if s == step}
        assert mine[("backward", "all_reduce")] >= 1
        assert not [k for k in mine if k[0] == "optimizer"], mine
    times = rows(run, "select min(duration_s) from events where step >= 0")
    assert times[0][0] > 0
    manifest = commlens.load_run(run).manifest
    assert manifest["backend"] == "gloo"
    assert all(r["clock"]["offset_ns"] == 0 for r in manifest["ranks"].values())
    holds_with_gradients(run, tmp)  # the sync_dist metrics vary: they are not gradients


@pytest.mark.parametrize("launcher", ["lightning", "torchrun"])
def test_trainer_ddp(tmp_path: Path, launcher: str) -> None:
    launch = [sys.executable]
    if launcher == "torchrun":
        launch += ["-m", "torch.distributed.run", f"--nproc_per_node={WORLD}"]
    _traced(tmp_path / "run", tmp_path / "work", launch)
    _holds(tmp_path / "run", tmp_path)


def test_nanogpt_style(tmp_path: Path) -> None:
    run = tmp_path / "run"
    got = run_ranks(nanogpt_job.job, WORLD, str(run), timeout=240)
    for rank in range(WORLD):
        assert recorded_ops(run, rank) == got[rank]["ops"]
    windows = sorted(set(commlens.load_run(run).steps_table().column("step").to_pylist()))
    assert windows == [-1, *range(got[0]["steps"])]  # rank 0's evaluations make no step
    phases = rows(run, "select distinct phase, op, module from events where step >= 0 "
                       "and dtype = 'float32' order by all")  # fmt: skip
    assert {(p, op) for p, op, _ in phases} == {("backward", "all_reduce")}
    assert all(m.startswith("module.") or m == "(root)" for *_, m in phases), phases
    times = rows(run, "select min(duration_s) from events where step >= 0")
    assert times[0][0] > 0
    holds_with_gradients(run, tmp_path)


def test_fabric_fsdp2(tmp_path: Path) -> None:
    run = tmp_path / "run"
    got = run_ranks(lightning_job.fabric_fsdp2_job, WORLD, str(run), timeout=240)
    for rank in range(WORLD):
        ours = dict(rows(run, f"select op, count(*) from events where rank = {rank} "
                              "group by op"))  # fmt: skip
        assert ours == got[rank], (rank, ours, got[rank])
    windows = sorted(set(commlens.load_run(run).steps_table().column("step").to_pylist()))
    assert windows[-lightning_job.STEPS :] == list(range(lightning_job.STEPS))
    mods = rows(run, "select phase, op, module, count(*) from events where rank = 0 "
                     "and step >= 0 group by all order by all")  # fmt: skip
    # each layer under Fabric's wrapper, by one path in forward and backward
    names = {m for _, _, m, _ in mods}
    assert names == {"_original_module.layers.0", "_original_module.layers.1"}, mods
    holds_with_gradients(run, tmp_path)
