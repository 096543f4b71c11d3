"""Numbers a user gives are finite and in range: one check, at every flag and key."""

from __future__ import annotations

import math

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.numbers import check_number


@pytest.mark.parametrize("value", ["nan", "-nan", "inf", "-inf", "1e999", "-0.5", "1.5"])
def test_validate_refuses_a_tolerance_that_would_pass_anything(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # nan passed every check (abs(err) > nan is never true) and -0.5 let nan through
    with pytest.raises(SystemExit) as info:
        main(["validate", "no-such-run", "--tolerance", value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--tolerance" in err and "Traceback" not in err


@pytest.mark.parametrize("value", [math.nan, math.inf, -1e-9, 1.01])
def test_the_library_refuses_it_too(value: float) -> None:
    from commlens.predict.validate import validate_events

    with pytest.raises(UsageError, match="--tolerance"):
        validate_events(None, None, tolerance=value)  # type: ignore[arg-type]


def test_check_number_bounds() -> None:
    assert check_number(0.0, "x", low=0.0) == 0.0
    assert check_number("2", "x", high=2.0) == 2.0  # type: ignore[arg-type]
    for bad, kwargs in [
        (0.0, {"low": 0.0, "low_open": True}),
        (math.nan, {}),
        (3.0, {"high": 2.0}),
        ("x", {}),
    ]:
        with pytest.raises(UsageError):
            check_number(bad, "x", **kwargs)  # type: ignore[arg-type]
