"""commlens predict and commlens net, in process through main()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.job import Job, ParallelDims, get_preset
from commlens.predict.forecast import predict
from commlens.predict.profiles import get_profiles


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        [
            "predict",
            "--model",
            "gpt-125m",
            "--scheme",
            "3d",
            "--dp",
            "2",
            "--tp",
            "2",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--net",
            "tcp-10g,rdma-100g",
        ],
        capsys,
    )
    step = out["per_step"]
    assert {"op", "role", "calls", "bytes", "wire_bytes"} <= set(step["ops"][0])
    assert step["total_bytes"] == sum(o["bytes"] for o in step["ops"])
    assert set(step["by_role"]) == {"dp", "tp", "pp"}
    assert {(o["op"], o["role"]) for o in step["ops"]} >= {
        ("all_reduce", "dp"),
        ("all_reduce", "tp"),
        ("send", "pp"),
        ("recv", "pp"),
    }
    nets = out["networks"]
    assert [n["name"] for n in nets] == ["tcp-10g", "rdma-100g"]
    for n in nets:
        assert {"comm_time_s", "step_time_s", "comm_share"} <= set(n)
        assert n["step_time_s"] == pytest.approx(n["comm_time_s"] + n["compute_time_s"])
        assert 0 < n["comm_share"] < 1
    assert nets[0]["speedup"] == 1.0 and nets[1]["speedup"] > 1
    assert out["textbook"]["ops"]


def test_ops_carry_their_time(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        ["predict", "--model", "gpt-350m", "--scheme", "dp", "--dp", "4", "--net", "tcp-10g"],
        capsys,
    )
    (op,) = out["per_step"]["ops"]
    assert op["op"] == "all_reduce" and op["time_s"]["tcp-10g"] > 0
    assert op["wire_bytes"] == pytest.approx(op["bytes"] * 2 * 3 / 4)
    assert op["wire_bytes_study_b"] == pytest.approx(op["bytes"] * 2)
    assert out["networks"][0]["comm_time_s"] == pytest.approx(op["time_s"]["tcp-10g"])


def test_text_output_names_every_network(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "bert-large", "--scheme", "zero3", "--dp", "8"]) == 0
    out = capsys.readouterr().out
    for word in ("all_gather", "reduce_scatter", "tcp-10g", "ipoib-100g", "rdma-100g", "speedup"):
        assert word in out


def test_shape_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    base = run_json(["predict", "--model", "gpt-125m", "--scheme", "dp", "--dp", "2"], capsys)
    wide = run_json(
        ["predict", "--model", "gpt-125m", "--scheme", "dp", "--dp", "2", "--layers", "24"], capsys
    )
    assert wide["per_step"]["total_bytes"] > 1.5 * base["per_step"]["total_bytes"]


def test_gpt13b_on_4096_gpus_models_one_rank_per_stage() -> None:
    job = Job(
        get_preset("gpt-13b"),
        "3d",
        ParallelDims(4096, tp=8, pp=16),
        seq_len=2048,
        microbatches=16,
        dtype="bf16",
    )
    nets = get_profiles("tcp-10g,ipoib-100g,rdma-100g,ib-ndr-400g")
    pred = predict(job, nets, gpus_per_node=8)
    # The work is one rank per pipeline stage, not one per GPU: 16 ranks of 4096.
    assert sorted(pred.per_rank) == [job.dims.rank_of(0, 0, p) for p in range(16)]
    assert pred.networks[-1].step_time_s < pred.networks[0].step_time_s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-7t", "--scheme", "dp"], "unknown model preset"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--tp", "2"], "use 3d"),
        (["--model", "gpt-tiny", "--scheme", "tp", "--tp", "3"], "does not divide"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--net", "nope"], "unknown network profile"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--dp", "0"], "positive"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--tflops", "0"], "tflops"),
        (["--model", "gpt-tiny", "--scheme", "dp", "--gpus-per-node", "0"], "gpus-per-node"),
    ],
)
def test_bad_input_is_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["predict", *args]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_net_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["net", "list"]) == 0
    out = capsys.readouterr().out
    for name in (
        "loopback",
        "tcp-10g",
        "ipoib-100g",
        "rdma-100g",
        "roce-200g",
        "ib-ndr-400g",
        "nvlink",
    ):
        assert name in out
    shown = run_json(["net", "show", "ipoib-100g"], capsys)
    assert shown["effective_Gbps"] == pytest.approx(30.0) and "Study A" in shown["source"]
    assert main(["net", "show", "rdma-100g"]) == 0
    assert "source" in capsys.readouterr().out
    assert main(["net", "show", "nope"]) != 0


def test_installed_command_runs() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commlens",
            "predict",
            "--model",
            "gpt-19m",
            "--scheme",
            "zero1",
            "--dp",
            "2",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["per_step"]["by_role"]["dp"]["calls"] > 1


def test_user_profile_file_and_hierarchy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(
        'name = "lab-1g"\nsource = "test"\nscope = "inter"\n'
        "[link]\nlatency_s = 5e-5\nbandwidth_Gbps = 1.0\nefficiency = 1.0\n"
    )
    args = ["predict", "--model", "gpt-125m", "--scheme", "dp", "--dp", "8", "--seq-len", "512"]
    flat = run_json([*args, "--net", f"{path},rdma-100g"], capsys)
    assert [n["name"] for n in flat["networks"]] == ["lab-1g", "rdma-100g"]
    # two nodes of four: the inter-node step moves a quarter as much per flow, four flows share
    # the link, and the intra-node steps run on nvlink, so the slow link still dominates
    nodes = run_json([*args, "--net", str(path), "--gpus-per-node", "4", "--algo", "auto"], capsys)
    assert nodes["settings"]["gpus_per_node"] == 4 and nodes["settings"]["algorithm"] == "auto"
    slow_flat = flat["networks"][0]["comm_time_s"]
    slow_nodes = nodes["networks"][0]["comm_time_s"]
    assert 0.4 * slow_flat < slow_nodes < slow_flat
    one_node = run_json([*args, "--net", str(path), "--gpus-per-node", "8"], capsys)
    assert one_node["networks"][0]["comm_time_s"] < slow_flat / 50  # all on nvlink
