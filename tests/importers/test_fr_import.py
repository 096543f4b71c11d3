"""Flight Recorder dumps imported as runs (through commlens doctor's reader, when built)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlens.trace.reader import load_run
from tests.importers.shared import imported, trace

pytest.importorskip(
    "commlens.importers.flight_recorder", reason="this build has no Flight Recorder reader"
)


def test_megatron_dumps(tmp_path: Path) -> None:
    out = imported(trace("flight_recorder/nvrx-megatron-16rank/gpu_error_1st"), tmp_path / "run")
    run = load_run(out)
    assert run.ranks == list(range(16))
    manifest = json.loads((out / "run.json").read_text())
    prov = manifest["import"]
    assert prov["source_format"] == "fr" and "2.9" in prov["format_version"]
    groups = prov["groups"]
    named = {g["desc"]: g["role"] for g in groups.values() if g["desc"] != "default_pg"}
    assert set(named.values()) == {"tp", "pp", "ep", "dp", "cp"}
    assert named["TENSOR_MODEL_PARALLEL_GROUP"] == "tp"
    assert named["PIPELINE_MODEL_PARALLEL_GROUP"] == "pp"
    assert named["EXPERT_MODEL_PARALLEL_GROUP"] == "ep"
    assert named["DATA_PARALLEL_GROUP_WITH_CP"] == "dp"
    states = {r: m["meta"]["fr_states"] for r, m in manifest["ranks"].items()}
    assert all(set(s) == {"scheduled"} for s in states.values())
    assert sum(sum(s.values()) for s in states.values()) == run.events.num_rows
    assert any("ends" in m for m in prov["missing"])  # no timing: ends unknown, said so
    assert manifest["time_semantics"] == "synthetic"  # no duration shown as measured


def test_gloo_dumps(tmp_path: Path) -> None:
    out = imported(trace("flight_recorder/generated-gloo-cpu"), tmp_path / "run")
    rows = load_run(out).events.to_pylist()
    assert {r["rank"] for r in rows} == {0, 1}
    assert sum(1 for r in rows if r["rank"] == 0) == 18


def test_a_pickle_that_is_not_a_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pickle

    from commlens.cli.main import main

    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "rank_0").write_bytes(pickle.dumps({"anything": [1, 2]}))
    (folder / "rank_1").write_bytes(pickle.dumps(Path("/etc")))  # a class: never loaded
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["import", str(folder), "--format", "fr", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a Flight Recorder dump" in err[0] and str(folder) in err[0]
    assert not out.exists()
