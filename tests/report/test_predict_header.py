"""`commlens predict` names the rank it shows in words, not as a Python dict."""

from __future__ import annotations

import pytest

from commlens.cli.main import main


def test_shown_rank_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--model", "gpt-1.3b", "--scheme", "3d", "--dp", "2", "--tp", "2"]
    assert main([*argv, "--pp", "2", "--width", "100"]) == 0
    text = capsys.readouterr().out
    assert "{" not in text and "'" not in text
    assert "rank 0 (dp 0, tp 0, pp 0)" in " ".join(text.split())
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 100
