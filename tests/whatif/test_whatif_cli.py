"""``commlens whatif`` on real captured runs (gloo, 2 ranks): self-replay, outputs, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.whatif.builders import BUILDERS
from commlens.whatif.model import build_program
from commlens.whatif.source import read_trace
from commlens.whatif.study import run_study
from tests.runs import SharedRuns
from tests.whatif.test_monotone import assert_monotone, network_ends

DP_OPS = {("all_reduce", "dp")}
EXPECTED_OPS = {  # per step after the first; the traced script's set-up broadcast is in step 0
    "dp": DP_OPS,
    "traced": DP_OPS,
    "pp": {("send", "pp"), ("recv", "pp"), ("all_reduce", "pp")},
}


@pytest.fixture
def runs(shared_runs: SharedRuns) -> dict[str, Path]:
    """The session's captured runs (tests/runs.py): gpt-tiny dp and pp, the DDP script."""
    return {name: shared_runs[name].path for name in ("dp", "pp", "traced")}


@pytest.mark.parametrize("scheme", ["dp", "pp", "traced"])
def test_replay_with_measured_times_gives_back_the_captured_steps(
    runs: dict[str, Path], scheme: str
) -> None:
    study = run_study(runs[scheme], "1gbit,rdma-100g")
    assert study.check.max_step_error < 1e-6
    assert study.check.max_event_error_s < 1e-6
    # step 0 (warm-up) left out; the traced script runs 5 steps
    assert study.captured.figures.steps == ([1, 2, 3, 4] if scheme == "traced" else [1, 2])
    assert [a.name for a in study.answers] == ["1gbit", "rdma-100g"]
    slow, rdma = (a.figures for a in study.answers)
    assert all(s > 0 for s in slow.step_s + rdma.step_s)
    # ops take longer on the slow link (a step's time, a difference of two ends, need not
    # be longer; nor need an op's time on two links of close rates, as tcp-10g and
    # rdma-100g for the DDP job's small buckets: an op that starts sooner on a free
    # worker waits longer there behind the bytes of the one ahead)
    assert sum(o.service_s for o in slow.ops) > sum(o.service_s for o in rdma.ops)
    ops = {(o.op, o.role) for o in slow.ops}
    assert EXPECTED_OPS[scheme] <= ops  # capture may add set-up ops (DDP's rebuild broadcast)


@pytest.mark.parametrize("scheme", ["dp", "pp", "traced"])
def test_a_slower_link_never_replays_a_captured_run_faster(
    runs: dict[str, Path], scheme: str
) -> None:
    for mode in sorted(BUILDERS):
        ends = network_ends(lambda: build_program(read_trace(runs[scheme])), mode, "loopback")
        assert_monotone(ends, "loopback", f"{scheme}, --op-times {mode}")
    # the own link named as a network gives the own-link row
    study = run_study(runs[scheme], "loopback")
    assert study.own_link is not None
    own, named = study.own_link.figures, study.answers[0].figures
    assert named.step_s == pytest.approx(own.step_s, rel=1e-6)


def test_text_and_json_answers(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(runs["pp"]), "--net", "tcp-10g,rdma-100g", "--width", "200"]) == 0
    text = capsys.readouterr().out
    assert "self-check: replay with measured op times reproduces the captured steps" in text
    for title in ("step time per network", "per op and role", "slowest rank", "assumes"):
        assert title in text
    assert main(["whatif", str(runs["pp"]), "--net", "tcp-10g", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["world_size"] == 2 and data["self_check"]["max_step_error"] < 1e-6
    assert data["placement"]["ranks_per_node"] == 1  # no nodes of its own: one rank per node
    (net,) = data["networks"]
    assert net["name"] == "tcp-10g" and net["profile"]["name"] == "tcp-10g"
    # the speedup is the own-link replay's (model against model), not the captured run's
    assert data["speedup_against"] == "own_link"
    own = data["own_link"]["median_step_s"]
    assert net["speedup"] == pytest.approx(own / net["median_step_s"])
    assert data["own_link"]["speedup"] == pytest.approx(1.0)


def test_markdown_and_html_files(runs: dict[str, Path], tmp_path: Path) -> None:
    for suffix in ("md", "html"):
        out = tmp_path / f"whatif.{suffix}"
        args = ["whatif", str(runs["dp"]), "--net", "rdma-100g", "--nodes", "1", "-o", str(out)]
        assert main(args) == 0
        assert "step time per network" in out.read_text()


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("commlens whatif: error: "), err
    return err


def test_bad_input_is_one_line(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    shutil.copytree(runs["pp"], missing)
    (missing / "rank-00001.parquet").unlink()
    assert "rank(s) 1 missing" in one_error(capsys, ["whatif", str(missing), "--net", "tcp-10g"])
    no_steps = tmp_path / "no-steps"
    shutil.copytree(runs["pp"], no_steps)
    for path in [no_steps / "run.json", *no_steps.glob("rank-*.json")]:
        meta = json.loads(path.read_text())
        for entry in meta.get("ranks", {}).values():
            entry["steps"] = []
        meta["steps"] = []
        path.write_text(json.dumps(meta))
    err = one_error(capsys, ["whatif", str(no_steps), "--net", "tcp-10g"])
    assert "no step markers" in err
    err = one_error(capsys, ["whatif", str(runs["pp"]), "--net", "tcp-10g,warp-drive"])
    assert "unknown network profile 'warp-drive'" in err
    err = one_error(capsys, ["whatif", str(runs["pp"]), "--net", "tcp-10g", "--nodes", "3"])
    assert "--nodes 3 must be a positive divisor" in err


def test_own_link_and_delta_op_times(runs: dict[str, Path], tmp_path: Path) -> None:
    model = run_study(runs["pp"], "loopback,tcp-10g")
    assert model.own_link is not None and model.own_link.name == "loopback"  # one gloo host
    assert model.model_error is not None
    delta = run_study(runs["pp"], "loopback,tcp-10g", op_times="delta", nodes=1)
    # on its own link and placement, measured + (own - own) is the capture itself
    assert delta.answers[0].figures.step_s == pytest.approx(delta.captured.figures.step_s)
    assert "measured time plus" in delta.assumptions[-1]
    slow = tmp_path / "slow.toml"
    slow.write_text('name = "slow"\n[link]\nlatency_s = 1e-3\nbandwidth_Gbps = 0.1\n')
    slower = run_study(runs["pp"], str(slow), op_times="delta", captured_net="loopback")
    assert slower.own_link is not None and slower.own_link.name == "loopback"
    steps = zip(slower.answers[0].figures.step_s, slower.captured.figures.step_s, strict=True)
    assert all(t > c + 1e-3 for t, c in steps)  # every step pays at least one more latency


def test_data_parallel_scale_out(runs: dict[str, Path]) -> None:
    from commlens.predict.profiles import get_profile
    from commlens.predict.topology import Fabric

    wide = run_study(runs["dp"], "tcp-10g", dp=8, op_times="model")
    bucket = next(o for o in wide.answers[0].figures.ops if o.op == "all_reduce")
    fabric = Fabric(inter=get_profile("tcp-10g"), intra=get_profile("loopback"))
    ranks = tuple(range(8))  # the two ranks and three copies of them, one per node
    expected = fabric.time("all_reduce", bucket.bytes, ranks, flows=1)
    assert bucket.service_s == pytest.approx(expected)
    assert any("--dp 8: the job is repeated to 8 ranks" in a for a in wide.assumptions)
    with pytest.raises(UsageError, match="no data-parallel group"):
        run_study(runs["pp"], "tcp-10g", dp=4)
    with pytest.raises(UsageError, match="multiple of the run's dp degree 2"):
        run_study(runs["dp"], "tcp-10g", dp=3)


def test_a_scale_out_is_placed_by_its_own_ranks(runs: dict[str, Path]) -> None:
    """``--nodes`` and ``--ranks-per-node`` count the ranks after ``--dp``, not the run's."""
    by_nodes = run_study(runs["dp"], "tcp-10g", dp=8, nodes=2, op_times="model")
    by_size = run_study(runs["dp"], "tcp-10g", dp=8, ranks_per_node=4, op_times="model")
    spread = run_study(runs["dp"], "tcp-10g", dp=8, op_times="model")  # the run's: 1 a node
    assert (by_nodes.placement.nodes, by_nodes.placement.ranks_per_node) == (2, 4)
    assert (by_size.placement.nodes, by_size.placement.ranks_per_node) == (2, 4)
    assert (spread.placement.nodes, spread.placement.ranks_per_node) == (8, 1)
    assert by_nodes.answers[0].figures == by_size.answers[0].figures
    with pytest.raises(
        UsageError, match="--nodes 3 must be a positive divisor of the scale-out's 8"
    ):
        run_study(runs["dp"], "tcp-10g", dp=8, nodes=3)
    with pytest.raises(UsageError, match="is not the scale-out's 8 ranks"):
        run_study(runs["dp"], "tcp-10g", dp=8, nodes=2, ranks_per_node=2)


def predict(capsys: pytest.CaptureFixture[str], run: Path, nets: str, out: Path) -> Path:
    assert main(["whatif", str(run), "--net", nets, "--format", "json", "-o", str(out)]) == 0
    capsys.readouterr()
    return out


def test_compare_a_prediction_with_the_measured_run(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pred = predict(capsys, runs["dp"], "tcp-10g", tmp_path / "pred.json")
    answer = json.loads(pred.read_text())
    assert main(["compare", str(pred), str(runs["dp"]), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # the reference is named as the run's folder
    assert data["reference"] == runs["dp"].name and [i["kind"] for i in data["inputs"]] == [
        "predicted",
        "measured",
    ]
    ours, measured = data["summary"]
    (net,) = answer["networks"]
    assert ours["input"] == "tcp-10g (predicted)" and ours["step_s"] == net["median_step_s"]
    # the measured side is found as whatif finds the captured run: the same figures
    assert measured["step_s"] == pytest.approx(answer["captured"]["median_step_s"])
    assert measured["comm_share"] == pytest.approx(answer["captured"]["comm_share"])
    assert ours["step_error"] == pytest.approx(ours["step_s"] / measured["step_s"] - 1)
    assert measured["step_error"] is None
    assert ours["share_error"] == pytest.approx((ours["comm_share"] - measured["comm_share"]) * 100)
    ops = {(o["input"], o["op"], o["role"]) for o in data["ops"]}
    assert (runs["dp"].name, "all_reduce", "dp") in ops
    assert ("tcp-10g (predicted)", "all_reduce", "dp") in ops
    argv = ["compare", str(pred), str(runs["dp"]), "--width", "200"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for title in ("predicted against measured", "step time per step", "per role", "per op"):
        assert title in text
    assert "tcp-10g (predicted): median step" in text and "error" in text


def compare_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("commlens compare: error: "), err
    return err


def test_compare_refuses_what_is_no_single_prediction(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(runs["dp"])
    two = predict(capsys, runs["dp"], "tcp-10g,rdma-100g", tmp_path / "two.json")
    err = compare_error(capsys, [str(two), run])
    assert "holds 2 networks (tcp-10g, rdma-100g): choose one with --net NAME" in err
    assert main(["compare", str(two), run, "--net", "rdma-100g", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"][0]["label"] == "rdma-100g (predicted)"
    assert "has no network 'ib'" in compare_error(capsys, [str(two), run, "--net", "ib"])
    report = tmp_path / "report.json"
    assert main(["report", run, "--format", "json", "-o", str(report)]) == 0
    assert "a JSON file but not a whatif result" in compare_error(capsys, [str(report), run])
    text = tmp_path / "notes.txt"
    text.write_text("step times\n")
    assert "not a whatif result (not JSON)" in compare_error(capsys, [str(text), run])
    err = compare_error(capsys, [str(two), str(two), "--net", "tcp-10g"])
    assert "needs a measured run beside it" in err
    assert "--net picks the network" in compare_error(capsys, [run, run, "--net", "tcp-10g"])
