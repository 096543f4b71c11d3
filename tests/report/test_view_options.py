"""--width and --steps: a bad value is one line and exit code 2, for every command with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.cli.report import MAX_WIDTH, MIN_WIDTH, parse_steps, parse_width
from commlens.errors import UsageError

RUN = str(Path(__file__).resolve().parents[1] / "data" / "tiny_run")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", RUN, "--width", "0"], "--width 0 is outside 40..1000 columns"),
        (["report", RUN, "--width", "-5"], "--width -5 is outside"),
        (["report", RUN, "--width", "100000"], "--width 100000 is outside"),
        (["report", RUN, "--width", "wide"], "--width 'wide' is not a number of columns"),
        (["compare", RUN, RUN, "--width", "39"], "--width 39 is outside"),
        (["query", RUN, "SELECT 1", "--width", "0"], "--width 0 is outside"),
        (["report", RUN, "--steps", "-1"], "--steps '-1': steps are numbered from 0"),
        (["report", RUN, "--steps=-3:"], "steps are numbered from 0"),
        (["report", RUN, "--steps", "1:-1"], "steps are numbered from 0"),
        (["report", RUN, "--steps", ":0"], "holds no step"),
        (["report", RUN, "--steps", "4:2"], "holds no step"),
        (["report", RUN, "--steps", "1:2:3"], "is not a step range"),
        (["report", RUN, "--steps", "10000000000"], "steps go up to 1,000,000,000"),
        (["compare", RUN, RUN, "--steps", "-1"], "steps are numbered from 0"),
        (["export", RUN, "--steps", "-1"], "steps are numbered from 0"),
    ],
)
def test_bad_value_is_one_line_with_exit_code_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"commlens {argv[0]}: error: ") and message in captured.err
    assert captured.err.count("\n") == 1


def test_good_values() -> None:
    assert parse_width(str(MIN_WIDTH)) == MIN_WIDTH and parse_width(str(MAX_WIDTH)) == MAX_WIDTH
    assert parse_steps("0") == (0, 1)
    assert parse_steps("0:") == (0, None)
    assert parse_steps(" 2 : 5 ") == (2, 5)
    with pytest.raises(UsageError):
        parse_width(str(MIN_WIDTH - 1))


def test_width_bounds_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    for width in (MIN_WIDTH, MAX_WIDTH):
        assert main(["report", RUN, "--width", str(width), "--steps", "1:"]) == 0
        assert "Communication by op and process group" in capsys.readouterr().out
