"""The manifest's workload section: one writer, one reader, runs on disk still load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commlens.errors import RunFormatError, UsageError
from commlens.job import Job, ParallelDims, RunSettings, get_preset, resolve_dims
from commlens.predict.validate import workload_of

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = sorted((ROOT / "tests" / "predict" / "data").glob("*/run.json"))


def full_job() -> Job:
    return Job(
        get_preset("bert-tiny"),
        "3d",
        resolve_dims("3d", 4, tp=2, pp=2),
        seq_len=64,
        micro_batch=3,
        microbatches=4,
        dtype="bf16",
        sequence_parallel=True,
        schedule="gpipe",
        recompute=True,
        run=RunSettings(steps=7, warmup_steps=2, seed=5, lr=0.5, backend="nccl"),
    )


def test_section_round_trips_through_json() -> None:
    job = full_job()
    data = json.loads(json.dumps(job.to_dict()))
    assert Job.from_dict(data) == job
    assert data["preset"] == "bert-tiny" and data["model"]["hidden"] == 64
    assert data["dims"] == {"world_size": 4, "dp": 1, "tp": 2, "pp": 2}
    assert (data["steps"], data["warmup_steps"], data["seed"], data["backend"]) == (
        7,
        2,
        5,
        "nccl",
    )


def test_a_preset_name_and_defaults_fill_a_short_section() -> None:
    section = {"model": "gpt-tiny", "scheme": "dp", "dims": {"world_size": 2}, "seq_len": 16}
    job = Job.from_dict({**section, "lr": 1})
    assert job == Job(
        get_preset("gpt-tiny"), "dp", ParallelDims(2), seq_len=16, run=RunSettings(lr=1.0)
    )


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: p.parent.name)
def test_checked_in_runs_load(path: Path) -> None:
    manifest = json.loads(path.read_text())
    section = workload_of(manifest)
    assert section is not None
    job = Job.from_dict(section)
    assert job.dims.world_size == manifest["world_size"]
    assert job.model.name == path.parent.name.split("-")[0] + "-tiny"
    assert Job.from_dict(job.to_dict()) == job
    assert job.to_dict() == section  # what commlens run wrote, field for field


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"model": "gpt-tiny", "scheme": "dp", "tp": 2}, "unknown key 'tp'"),
        ({"model": "gpt-tiny", "scheme": "dp"}, "no dims"),
        ({"model": "gpt-tiny", "dims": {"world_size": 2}}, "no scheme"),
        ({"model": "gpt-tiny", "scheme": "dp", "dims": [2]}, "dims must be a table"),
        ({"model": "gpt-tiny", "scheme": "dp", "dims": {"world_size": "2"}}, "an integer"),
        ({"model": "gpt-tiny", "scheme": "dp", "dims": {"ranks": 2}}, "unknown key 'dims.ranks'"),
        ({"model": {"name": "x", "width": 3}, "scheme": "dp", "dims": {}}, "'model.width'"),
        ({"model": "gpt-tiny", "scheme": "dp", "dims": {"world_size": 2}, "recompute": 1}, "true"),
        ("gpt-tiny", "must be a table"),
    ],
)
def test_a_bad_section_names_what_is_wrong(section: Any, message: str) -> None:
    with pytest.raises(RunFormatError, match=message) as info:
        Job.from_dict(section)
    assert "\n" not in str(info.value)


def test_a_section_of_an_impossible_job_is_refused_as_such() -> None:
    with pytest.raises(UsageError, match="pure data parallelism"):
        Job.from_dict({"model": "gpt-tiny", "scheme": "dp", "dims": {"world_size": 2, "tp": 2}})
    with pytest.raises(UsageError, match="warmup-steps"):
        Job.from_dict(
            {"model": "gpt-tiny", "scheme": "dp", "dims": {"world_size": 2}, "warmup_steps": 5}
        )


def test_the_model_shapes_do_not_import_the_memory_estimate() -> None:
    code = "import sys, commlens.job.models; print('commlens.job.memory' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
