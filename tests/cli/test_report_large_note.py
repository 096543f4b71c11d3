"""`commlens report` on a large run says on stderr how many events it read, and how long it took."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.cli import report as report_cli
from commlens.cli.main import main

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_run"


def test_a_large_run_gets_a_note_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_cli, "LARGE_RUN_EVENTS", 50)  # the tiny run has 52
    assert main(["report", str(TINY), "--width", "100"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0] == "commlens report: 52 events of 4 ranks; reading them..."
    assert lines[-1].startswith("commlens report: 52 events read and analysed in ")
    assert captured.out.startswith("commlens report: gpt-tiny dp+tp, 4 ranks (gloo; tiny_run)")


def test_a_small_run_gets_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(TINY)]) == 0
    assert capsys.readouterr().err == ""
