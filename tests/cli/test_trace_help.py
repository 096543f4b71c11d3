"""`commlens trace --help` reads as plain text (its description is the module docstring)."""

from __future__ import annotations

import pytest

from commlens.cli.main import main


def test_trace_help_has_no_rst_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["trace", "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "commlens trace --out DIR -- COMMAND" in text
