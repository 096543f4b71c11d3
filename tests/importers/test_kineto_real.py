"""Real GPU-cluster profiler traces: the 8-rank V100 DLRM job with its execution
traces, MI300X (RCCL, every kernel ncclDevKernel_Generic), B200 (15 listed groups)."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.trace.reader import load_run
from tests.importers.shared import trace


def _et_sizes(archive: Path) -> dict[int, list[tuple[str, int]]]:
    """rank -> (collective, bytes of its input) of every non-wait comm node, from the ETs."""
    out: dict[int, list[tuple[str, int]]] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".json"):
                continue
            data = json.load(tar.extractfile(member))  # type: ignore[arg-type]
            rank = int(member.name.rsplit("_", 1)[1].split(".")[0])
            rows = []
            for node in data["nodes"]:
                if node["name"] != "record_param_comms" or node["inputs"][3] == "wait":
                    continue
                t = node["inputs"][0]
                tensors = t if isinstance(t[0], list) else [t]
                rows.append((node["inputs"][4], sum(x[3] * x[4] for x in tensors)))
            out[rank] = rows
    return out


def _nccl_kernels(archive: Path) -> dict[int, list[int]]:
    """rank -> the durations (ns) of its NCCL kernels, read with json.load."""
    out: dict[int, list[int]] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".json"):
                continue
            data = json.load(tar.extractfile(member))  # type: ignore[arg-type]
            rank = data["distributedInfo"]["rank"]
            out[rank] = [
                round(e["dur"] * 1000)
                for e in data["traceEvents"]
                if e.get("cat") == "kernel" and "nccl" in e["name"]
            ]
    return out


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kineto = trace("kineto/param-dlrm-8rank/dlrm_kineto.tar.gz")
    et = trace("kineto/param-dlrm-8rank/dlrm_pytorch_et.tar.gz")
    out = tmp_path_factory.mktemp("dlrm") / "run"
    assert main(["import", str(kineto), str(et), "--out", str(out)]) == 0
    return out


def test_dlrm_sizes_from_the_execution_trace(dlrm: Path) -> None:
    et = _et_sizes(trace("kineto/param-dlrm-8rank/dlrm_pytorch_et.tar.gz"))
    kernels = _nccl_kernels(trace("kineto/param-dlrm-8rank/dlrm_kineto.tar.gz"))
    run = load_run(dlrm)
    assert run.ranks == list(range(8)) and run.world_size == 8
    names = {"allreduce": "all_reduce", "all_to_all": "all_to_all", "all_to_allv": "all_to_all"}
    for rank in range(8):
        rows = [r for r in run.events.to_pylist() if r["rank"] == rank]
        assert sorted(r["op"] for r in rows) == ["all_reduce"] * 3 + ["all_to_all"] * 5
        got = sorted((r["op"], r["bytes_in"]) for r in rows)
        assert got == sorted((names[c], b) for c, b in et[rank])
        durations = sorted(r["t_end_ns"] - r["t_issue_ns"] for r in rows)
        assert durations == sorted(kernels[rank])  # each op timed by its own NCCL kernel
        assert all(r["step"] == 10 for r in rows)


def test_dlrm_matched_across_ranks(dlrm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(dlrm), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    skew = {row["op"]: row["instances"] for row in doc["skew"]}
    assert skew == {"all_to_all": 5, "all_reduce": 3}  # every op matched over the 8 ranks
    assert {(o["op"], o["count"]) for o in doc["ops"]} == {("all_to_all", 40), ("all_reduce", 24)}
    manifest = doc["run"]
    assert any("execution trace" in e for e in manifest["import"]["estimated"])


def test_dlrm_commands_run(dlrm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(dlrm), str(dlrm)]) == 0
    assert "imported from: kineto" in capsys.readouterr().out
    out = tmp_path / "dlrm.chrome.json"
    assert main(["export", str(dlrm), "--format", "chrome", "-o", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X") >= 64
    assert main(["whatif", str(dlrm), "--net", "rdma-100g,tcp-10g"]) == 0
    text = capsys.readouterr().out
    assert "tcp-10g" in text and "imported from: kineto" in text
    capsys.readouterr()
    assert main(["validate", str(dlrm)]) == 0
    assert "imported from: kineto" in capsys.readouterr().out


def test_mi300x_ops_from_args(tmp_path: Path) -> None:
    src = trace("kineto/tracelens-mi300x/resnet_act_checkpoint.json.gz")
    data = json.load(gzip.open(src))
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]]
    assert {k["name"].split("(")[0] for k in kernels} == {"ncclDevKernel_Generic"}
    out = tmp_path / "run"
    assert main(["import", str(src), "--out", str(out)]) == 0
    rows = load_run(out).events.to_pylist()
    assert sorted(r["op"] for r in rows) == ["all_reduce"] * 6 + ["broadcast"] * 6
    assert {r["dtype"] for r in rows if r["op"] == "all_reduce"} == {"bfloat16"}
    assert {r["api"] for r in rows} == {"record_param_comms"}
    assert all(r["t_end_ns"] > r["t_issue_ns"] for r in rows)


def test_b200_all_gather_and_its_group(tmp_path: Path) -> None:
    src = trace("kineto/tracelens-b200/eager_trace.json.gz")
    out = tmp_path / "run"
    assert main(["import", str(src), "--out", str(out)]) == 0
    rows = load_run(out).events.to_pylist()
    assert len(rows) == 1
    (ag,) = rows
    assert ag["op"] == "all_gather" and ag["pg_name"] == "3" and ag["dtype"] == "bfloat16"
    assert (ag["count"], ag["bytes_in"], ag["size_bytes"]) == (25_136, 50_272, 402_176)
    assert ag["pg_ranks"] == list(range(8))
    assert ag["t_end_ns"] - ag["t_issue_ns"] == 21_953  # its kernel, 22 µs
    groups = json.loads((out / "run.json").read_text())["import"]["groups"]
    assert len(groups) == 15 and "3" in groups


@pytest.mark.e2e  # reads the ranks in worker processes
def test_ranks_read_in_parallel_give_the_same_run(
    dlrm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from commlens.importers import kineto

    monkeypatch.setattr(kineto, "PARALLEL_BYTES", 0)  # the sample is small: force the pool
    kineto_src = trace("kineto/param-dlrm-8rank/dlrm_kineto.tar.gz")
    et = trace("kineto/param-dlrm-8rank/dlrm_pytorch_et.tar.gz")
    out = tmp_path / "run"
    assert main(["import", str(kineto_src), str(et), "--out", str(out), "--jobs", "2"]) == 0
    assert load_run(out).events.equals(load_run(dlrm).events)


def test_execution_traces_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    et = trace("kineto/param-dlrm-8rank/dlrm_pytorch_et.tar.gz")
    out = tmp_path / "run"
    assert main(["import", str(et), "--format", "et", "--out", str(out)]) == 0
    rows = load_run(out).events.to_pylist()
    sizes = _et_sizes(et)
    assert sorted({r["rank"] for r in rows}) == list(range(8))
    for rank in range(8):
        assert sorted(r["bytes_in"] for r in rows if r["rank"] == rank) == sorted(
            b for _, b in sizes[rank]
        )
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "SYNTHETIC" in capsys.readouterr().out  # no times in an ET: none shown as measured


def test_old_schema_two_of_128_ranks_by_glob(tmp_path: Path) -> None:
    """HTA's trace_filter sample: no comm args; ops from the c10d ops, sizes from their
    Input Dims where they have any, kernel times joined through the launches."""
    folder = trace("kineto/hta-trace_filter")
    out = tmp_path / "run"
    assert main(["import", str(folder / "sampled_rank-*.json.gz"), "--out", str(out)]) == 0
    run = load_run(out)
    assert run.ranks == [0, 1] and run.world_size == 128
    for rank in (0, 1):
        rows = [r for r in run.events.to_pylist() if r["rank"] == rank]
        ops = sorted(r["op"] for r in rows)
        assert ops == ["all_gather"] * 2 + ["all_reduce"] * 4 + ["all_to_all"] * 4
        # _allgather_base_ of [16777216] into [1073741824] signed chars
        assert {r["size_bytes"] for r in rows if r["op"] == "all_gather"} == {1 << 30}
        # allreduce_ holds a TensorList without shapes: size unknown, never guessed
        assert {r["size_bytes"] for r in rows if r["op"] == "all_reduce"} == {0}
    prov = json.loads((out / "run.json").read_text())["import"]
    assert "old schema" in prov["format_version"]
    assert any("size unknown" in m for m in prov["missing"])
    assert prov["ranks_missing"] == list(range(2, 128))
