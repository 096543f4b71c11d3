"""Text output honours --width and $COLUMNS (`net list` as the example of a wide table)."""

from __future__ import annotations

import pytest

from commlens.cli.main import main


def _widest(text: str) -> int:
    return max(len(line.rstrip()) for line in text.splitlines())


def test_net_list_fits_columns_and_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["net", "list"]) == 0
    natural = capsys.readouterr().out  # stdout is no terminal: tables at their natural width
    assert _widest(natural) > 100
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["net", "list"]) == 0
    fitted = capsys.readouterr().out
    assert _widest(fitted) <= 100
    lines = natural.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("──"))
    names = [line.split()[0] for line in lines[rule + 1 :] if line.strip()]
    assert "tcp-10g" in names
    assert all(name in fitted for name in names)  # every profile still listed
    assert main(["net", "list", "--width", "80"]) == 0  # --width wins over $COLUMNS
    assert _widest(capsys.readouterr().out) <= 80


def test_width_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["net", "list", "--width", "x"])
    assert exit_.value.code == 2 and "not a number of columns" in capsys.readouterr().err
