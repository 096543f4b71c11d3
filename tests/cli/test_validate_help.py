"""Every --format says what it takes (validate, query, net, predict)."""

from __future__ import annotations

import pytest

from commlens.cli.main import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["validate"], "--format {text,md,html,json} output format: text, md, html, json"),
        (["query"], "output format: text (a table), csv or json"),
        (["net", "list"], "--format {text,md,html,json} output format"),
        (["predict"], "output format (default text)"),
    ],
)
def test_format_has_help(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert said in text and "--width COLUMNS" in text
