"""Sweep files: parsing, refusals, grid expansion, skipped points, the CLI's one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.sweep import expand, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]

BASIC = """
[sweep]
name = "t"
nproc = 2
steps = 3
seq_len = 32
[grid]
model = ["gpt-tiny"]
scheme = ["dp", "tp", "pp"]
seq_len = [32, 64]
[schemes.pp]
microbatches = 2
"""


def test_grid_is_the_product_with_scheme_settings() -> None:
    points = expand(parse_spec(BASIC))
    assert len(points) == 6
    assert [p.scheme for p in points] == ["dp", "dp", "tp", "tp", "pp", "pp"]
    assert [p.seq_len for p in points[:2]] == [32, 64]
    pp = [p for p in points if p.scheme == "pp"]
    assert all(p.microbatches == 2 and p.layout == (1, 1, 2) for p in pp)
    assert all(p.microbatches == 1 for p in points if p.scheme != "pp")
    assert len({p.id for p in points}) == 6
    assert points[2].layout == (1, 2, 1)
    assert not any(p.skip_reason for p in points)


def test_run_args_of_a_point() -> None:
    spec = parse_spec(BASIC.replace("nproc = 2", 'nproc = 4\nnodes = 2\nlink = "500mbit"'))
    point = expand(spec)[0]
    args = point.run_args("OUT", 3, 1, 7)
    joined = " ".join(args)
    assert "--model gpt-tiny --scheme dp --nproc 4" in joined
    assert "--seq-len 32" in joined and "--steps 3 --warmup-steps 1 --seed 7" in joined
    assert "--nodes 2 --link 500mbit" in joined and args[-2:] == ["--out", "OUT"]
    assert point.network == "2 nodes, 500mbit"
    unshaped = expand(parse_spec(BASIC.replace("nproc = 2", "nproc = 4\nnodes = 2")))[0]
    assert "--link" not in unshaped.run_args("O", 3, 1, 1)
    assert "--nodes 2" in " ".join(unshaped.run_args("O", 3, 1, 1))
    assert unshaped.id.endswith("2n-unshaped")


def test_impossible_points_are_skipped_with_the_reason() -> None:
    text = BASIC.replace('scheme = ["dp", "tp", "pp"]', 'scheme = ["dp", "tp"]')
    text = text.replace("nproc = 2", "nproc = 3").replace("[schemes.pp]\nmicrobatches = 2", "")
    points = expand(parse_spec(text))
    tp = [p for p in points if p.scheme == "tp"]
    assert tp and all("head" in p.skip_reason or "divid" in p.skip_reason for p in tp)
    assert not any(p.skip_reason for p in points if p.scheme == "dp")


def test_t5_pipeline_and_link_on_one_node_are_skipped() -> None:
    text = BASIC.replace('model = ["gpt-tiny"]', 'model = ["t5-tiny"]')
    points = expand(parse_spec(text))
    assert all("T5" in p.skip_reason for p in points if p.scheme == "pp")
    text = BASIC.replace("nproc = 2", 'nproc = 2\nlink = "1gbit"')
    with pytest.raises(UsageError, match=r"no point can run.*nodes >= 2"):
        expand(parse_spec(text))


@pytest.mark.parametrize(
    "text, message",
    [
        ("[sweep\nname=1", "not valid TOML"),
        ('[sweeps]\nname = "x"', r"unknown table \[sweeps\]"),
        ('[sweep]\nnmae = "x"\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "'nmae'"),
        ('[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]\nsequence = [1]', "'sequence'"),
        ('[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]\nseq_len = ["long"]', "seq_len must be"),
        ('[grid]\nmodel = ["gpt-tiny"]\nscheme = []', "scheme is an empty list"),
        ('[grid]\nmodel = ["gpt-tiny"]', "no scheme"),
        ('[sweep]\nseq_len = [1, 2]\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "one value"),
        ('[sweep]\nsteps = 1\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "steps must be"),
        ('[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]\nnproc = [0]', "at least 1"),
        ('[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]\n[scale]\nnproc = 8', "models must be"),
        ('[sweep]\ntolerance = nan\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "finite"),
        ('[sweep]\ntolerance = -0.1\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "above 0"),
        ('[sweep]\ntolerance = 2.0\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "at most 1"),
        ('[sweep]\ntimeout_s = inf\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "finite"),
        ('[sweep]\ntimeout_s = nan\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "finite"),
        ('[sweep]\ntimeout_s = 1e300\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]', "at most"),
        # a sweep's networks take every form predict and whatif take, and the error says so
        (
            '[sweep]\nnetworks = "x"\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]',
            r"list of networks: profile names, .*FILE\.toml.*200mbit.*unshaped",
        ),
        (
            '[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]\n'
            '[scale]\nmodels = {a = "b"}\nnetworks = []',
            r"non-empty list of networks: profile names, .*200mbit",
        ),
    ],
)
def test_bad_files_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        expand(parse_spec(text, "bad.toml"))
    assert "\n" not in str(info.value) and str(info.value).startswith("bad.toml")


def test_unknown_model_or_unused_scheme_table() -> None:
    with pytest.raises(UsageError, match=r"no point can run.*preset"):
        expand(parse_spec('[grid]\nmodel = ["gpt-huge"]\nscheme = ["dp"]'))
    with pytest.raises(UsageError, match=r"\[schemes.zero3\] matches no point"):
        expand(parse_spec(BASIC + "[schemes.zero3]\nnproc = 2\n"))


def test_cli_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp"]\nwarp = 9\n')
    assert main(["sweep", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'warp'" in err and "Traceback" not in err
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2
    assert "no such sweep file" in capsys.readouterr().err
    good = tmp_path / "good.toml"
    good.write_text(BASIC)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["sweep", str(good), "--out", str(tmp_path)]) == 2
    assert "not a sweep directory" in capsys.readouterr().err
    assert notes.read_text() == "mine"


def test_cli_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.toml"
    good.write_text(BASIC)
    assert main(["sweep", str(good), "--list"]) == 0
    out = capsys.readouterr().out
    assert out.count("gpt-tiny_") == 6 and "gpt-tiny_pp_dp1-tp1-pp2_s64_b2_k2_loopback" in out


def test_the_study_files_expand() -> None:
    a = expand(load_spec(ROOT / "examples" / "study-a.toml"))
    assert len(a) == 27
    assert {p.link_label for p in a} == {"200mbit", "1gbit", "unshaped"}
    assert all(p.nodes == 2 and p.nproc == 4 for p in a)
    skipped = [p for p in a if p.skip_reason]
    assert {(p.model, p.scheme) for p in skipped} == {("t5-tiny", "pp")}
    b = expand(load_spec(ROOT / "examples" / "study-b.toml"))
    assert len(b) == 18 and not any(p.skip_reason for p in b)
    assert {p.seq_len for p in b} == {32, 64, 128}
    assert {p.scheme for p in b} == {"dp", "zero1", "zero2", "zero3", "tp", "pp"}


def test_demo_plan_emulated_or_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    from commlens.sweep.demo import SLOW_LINK, demo_plan, emulation_available

    emulated = expand(demo_plan(True).spec)
    assert [(p.scheme, p.link_label) for p in emulated] == [
        (s, link) for s in ("dp", "tp", "pp") for link in (SLOW_LINK, "unshaped")
    ]
    assert all(p.nodes == 2 and p.nproc == 4 and not p.skip_reason for p in emulated)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert emulation_available() == (False, "not root")
    plan = demo_plan()
    assert not plan.emulated and plan.reason.startswith("loopback only (not root)")
    loop = expand(plan.spec)
    assert [p.network for p in loop] == ["loopback"] * 3
    assert [p.layout for p in loop] == [(4, 1, 1), (1, 4, 1), (2, 1, 2)]
