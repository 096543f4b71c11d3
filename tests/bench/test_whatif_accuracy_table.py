"""The accuracy benchmark's options and scoring (benchmarks/whatif_accuracy.py), without runs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def acc() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("whatif_accuracy")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def tab(acc: ModuleType) -> ModuleType:
    return sys.modules["accuracy_table"]


def test_options_default_and_quick(acc: ModuleType) -> None:
    full = acc.parse_args([])
    assert (full.sets, full.steps, full.repeats, full.windows) == (["main"], 12, 3, 1)
    assert full.out.is_absolute()
    quick = acc.parse_args(["--quick", "--set", "main,fsdp2", "--windows", "4"])
    assert (quick.sets, quick.steps, quick.repeats, quick.windows) == (["main", "fsdp2"], 6, 2, 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "mian"], "unknown set 'mian'"),
        (["--set", ","], "unknown set"),
        (["--real", "gpt"], "unknown job 'gpt'"),
        (["--repeats", "1"], "--repeats must be at least 2"),
        (["--steps", "2"], "--steps must be at least 3"),
        (["--windows", "0"], "--windows must be at least 1"),
    ],
)
def test_bad_options_are_one_usage_error(
    acc: ModuleType, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        acc.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_real_job_rotates_over_the_windows(acc: ModuleType) -> None:
    opts = acc.parse_args([])
    seen = [acc.real_job(opts, w) for w in range(1, len(acc.REAL) + 2)]
    assert seen[: len(acc.REAL)] == acc.REAL and seen[-1] == acc.REAL[0]
    assert acc.real_job(acc.parse_args(["--real", "tp"]), 3) == "tp"


def test_job_commands_use_the_cli(acc: ModuleType, tmp_path: Path) -> None:
    cmd = acc.job_command("pp-sleep", tmp_path / "r", "200mbit", 12, 4, 2)
    assert cmd[1:4] == ["-m", "commlens", "trace"] and cmd[-3:] == [
        "benchmarks/accuracy_job.py",
        "pp",
        "12",
    ]
    assert "--link" in cmd and cmd[cmd.index("--link") + 1] == "200mbit"
    unshaped = acc.job_command("zero3", tmp_path / "r", "unshaped", 6, 2, 2)
    assert unshaped[3] == "run" and "--link" not in unshaped
    assert unshaped[unshaped.index("--nproc") + 1] == "2"


def test_noise_floor_and_cv(tab: ModuleType) -> None:
    assert tab.cv([1.0, 1.0, 1.0]) == 0.0 and tab.noise_floor([2.0]) == 0.0
    # one run of three 20% slow: it predicts the others +20%, each of them it -8.3%
    assert tab.noise_floor([1.0, 1.0, 1.2]) == pytest.approx((0.2 + 2 * (1 - 1 / 1.1)) / 3)
    assert tab.cv([0.9, 1.0, 1.1]) == pytest.approx(0.1)


def test_self_cell_scores_each_capture_against_itself(tab: ModuleType) -> None:
    c = tab.Cell("ddp-sleep", "1gbit", True, True, [0.095, 0.21], [0.1, 0.2])
    assert c.errors == pytest.approx([-0.05, 0.05])
    assert c.error == pytest.approx(0.305 / 0.3 - 1) and c.verdict == "pass"
    assert tab.Cell("j", "1gbit", True, True, [0.094], [0.1]).verdict == "fail"  # > 5% self


def test_cross_cell_scores_against_the_mean_of_the_runs(tab: ModuleType) -> None:
    c = tab.Cell("ddp-sleep", "200mbit", False, True, [0.19, 0.23], [0.2, 0.2, 0.2])
    assert c.errors == pytest.approx([-0.05, 0.15]) and c.error == pytest.approx(0.05)
    assert c.verdict == "pass"  # the mean prediction is judged, within 10%
    assert tab.Cell("j", "x", False, True, [0.23], [0.2]).verdict == "fail"


def test_a_real_cell_is_judged_only_when_the_noise_allows(tab: ModuleType) -> None:
    quiet = tab.Cell("dp", "200mbit", False, False, [0.3], [0.2, 0.21, 0.205], 0.02)
    assert quiet.verdict == "fail"  # 2 sigma within 10%: judged
    noisy_runs = tab.Cell("dp", "200mbit", False, False, [0.3], [0.2, 0.26, 0.23], 0.02)
    noisy_captures = tab.Cell("dp", "200mbit", False, False, [0.2], [0.2, 0.2, 0.2], 0.06)
    assert noisy_runs.verdict == noisy_captures.verdict == tab.NOISE_TOO_LARGE
    controlled = tab.Cell("ddp-sleep", "200mbit", False, True, [0.23], [0.2, 0.26, 0.23])
    assert controlled.verdict == "pass"  # a controlled job is always judged


def test_a_window_is_void_when_a_controlled_job_is_noisy(tab: ModuleType) -> None:
    steady = [0.2, 0.201, 0.199]
    w = tab.Window(
        [
            tab.Cell("ddp-sleep", "1gbit", True, True, steady, steady),
            tab.Cell("dp", "200mbit", False, False, [0.2], [0.1, 0.3, 0.2]),  # real: no void
        ]
    )
    assert w.void_reasons() == []
    w.cells.append(tab.Cell("pp-sleep", "unshaped", False, True, [0.2], [0.2, 0.23, 0.2]))
    assert [r.split(":")[0] for r in w.void_reasons()] == ["pp-sleep on unshaped"]


def test_table_prints_verdicts_signs_and_sensitivity(tab: ModuleType) -> None:
    w = tab.Window(
        [
            tab.Cell("ddp-sleep", "1gbit", True, True, [0.098, 0.097, 0.103], [0.1, 0.1, 0.1]),
            tab.Cell("ddp-sleep", "200mbit", False, True, [0.3, 0.3, 0.3], [0.28, 0.28, 0.28]),
            tab.Cell("ddp-sleep", "unshaped", False, True, [0.1] * 3, [0.095, 0.095, 0.095]),
            tab.Cell("dp", "200mbit", False, False, [0.2], [0.1, 0.3, 0.2]),
        ],
        loads=[1.5, 3.25],
    )
    text = tab.table(w, "title", "200mbit", "unshaped")
    lines = text.splitlines()
    assert lines[0] == "title"
    row = next(line for line in lines if line.startswith("dp "))
    assert tab.NOISE_TOO_LARGE in row and "100.0, 300.0, 200.0" in row
    assert "self-replays: 2 of 3 short, 1 long" in text
    assert "controlled cells: 3 pass" in text and "real cells: 1 host noise too large" in text
    assert "sensitivity ddp-sleep (200mbit over unshaped): predicted 3.00x, measured 2.95x" in text
    assert "load average (1 min) over the runs: 1.5 to 3.2" in text


def test_reuse_keeps_a_run_and_its_load(acc: ModuleType, tmp_path: Path) -> None:
    run = tmp_path / "ddp-sleep-1gbit-r1"
    run.mkdir()
    (run / "run.json").write_text("{}")
    opts = acc.parse_args(["--reuse", "--out", str(tmp_path)])
    assert opts.reuse and opts.out == tmp_path
    kept = acc.launch("ddp-sleep", run, "1gbit", 12, reuse=True)  # nothing is started
    assert kept.path == run and kept.load != kept.load  # not known: nan
    (tmp_path / "ddp-sleep-1gbit-r1.load").write_text("2.5\n")
    assert acc.launch("ddp-sleep", run, "1gbit", 12, reuse=True).load == 2.5
