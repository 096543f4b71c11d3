"""Hugging Face Trainer (DDP, gradient accumulation), accelerate and FSDP2 over GPT-2:
every op against torch.profiler, and each op's step, phase and module, with no annotation;
each validates with its gradient-bytes check formed, and fails with its bytes tripled."""

from __future__ import annotations

from pathlib import Path

import pytest

import commlens
from tests.distributed import run_ranks
from tests.frameworks import hf_job
from tests.frameworks.hf_job import STEPS
from tests.frameworks.observe import holds_with_gradients, recorded_ops, rows

pytest.importorskip("transformers")
WORLD = 2


def _same_ops_as_profiler(run: Path, seen: list[dict[str, int]]) -> None:
    for rank in range(WORLD):
        assert recorded_ops(run, rank) == seen[rank], rank


def _windows(run: Path) -> list[int]:
    return [s["step"] for s in commlens.load_run(run).manifest["ranks"]["0"]["steps"]]


def test_trainer_ddp_with_accumulation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen = run_ranks(hf_job.trainer_job, WORLD, str(out), str(tmp_path / "work"), timeout=240)
    _same_ops_as_profiler(out, seen)
    assert _windows(out) == [-1, *range(STEPS)]  # DDP's wrap-time checks are set-up
    got = rows(
        out,
        "select step, phase, op, api, count(*) from events where rank = 0 and step >= 0 "
        "group by all order by all",
    )
    assert {s for s, *_ in got} == set(range(STEPS))  # no step the job never ran
    for step in range(STEPS):
        mine = {(phase, op, api): n for s, phase, op, api, n in got if s == step}
        # One synced micro-step of ACCUM: DDP's buckets in backward...
        assert ("backward", "all_reduce", "c10d") in mine
        # ... and the Trainer's logging gather after the optimizer step, in the same step.
        assert mine.get(("other", "all_gather", "python"), 0) >= 1
    modules = rows(out, "select distinct module from events where phase = 'backward'")
    assert all(m.startswith("module.") for (m,) in modules)  # paths under DDP, not classes
    holds_with_gradients(out, tmp_path)  # though its logging gathers vary in size


def test_accelerate_loop(tmp_path: Path) -> None:
    seen = run_ranks(hf_job.accelerate_job, WORLD, str(tmp_path), timeout=240)
    _same_ops_as_profiler(tmp_path, seen)
    n_steps = 8 * hf_job.ACCUM * STEPS // WORLD // 2 // hf_job.ACCUM
    assert _windows(tmp_path) == [-1, *range(n_steps)]
    got = rows(
        tmp_path,
        "select step, phase, op, count(*) from events where rank = 0 and step >= 0 "
        "group by all order by all",
    )
    for step in range(n_steps):  # the gathered metric stays in the step it measured
        mine = {(phase, op): n for s, phase, op, n in got if s == step}
        assert mine[("backward", "all_reduce")] == 1 and mine[("other", "all_gather")] == 1
    holds_with_gradients(tmp_path, tmp_path.parent)


def test_fsdp2_over_gpt2(tmp_path: Path) -> None:
    seen = run_ranks(hf_job.fsdp2_job, WORLD, str(tmp_path), timeout=240)
    _same_ops_as_profiler(tmp_path, seen)
    assert _windows(tmp_path) == list(range(STEPS))  # no set-up traffic: no set-up window
    got = rows(
        tmp_path,
        "select phase, op, module, count(*) from events where rank = 0 group by all order by all",
    )
    blocks = ["transformer.h.0", "transformer.h.1"]
    assert got == sorted(
        [("forward", "all_gather", m, STEPS) for m in ["(root)", *blocks]]
        + [("backward", "all_gather", m, STEPS) for m in blocks]  # re-gathers in backward
        + [("backward", "reduce_scatter", m, STEPS) for m in ["(root)", *blocks]]
    )
    holds_with_gradients(tmp_path, tmp_path.parent)
