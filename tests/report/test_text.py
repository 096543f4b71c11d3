"""The text report of the checked-in tiny run, compared whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.data.make_tiny_run import EXPECTED, expected_text

DATA = Path(__file__).parent.parent / "data"


def test_text_report_matches_expected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    got = expected_text("tiny_run")
    want = EXPECTED.read_text()
    assert got == want, "regenerate with: python -m tests.data.make_tiny_run (then review)"


def test_expected_figures_are_the_hand_computed_ones() -> None:
    """Guard the checked-in expectation itself against a wrong regeneration."""
    text = EXPECTED.read_text()
    # dp all-reduce: 16 x 1 MiB over 26.8 ms issue -> end, 19.4 ms of service (the two
    # overlapping buckets run at once on gloo's two workers and share the time: on
    # ranks 0-2 bucket A holds 1.5 ms, B 1.0 ms; on rank 3, 300 us late, 1.35 and 0.85);
    # both wait 300 us for rank 3 on ranks 0-2. Bandwidth over transfer time of the calls
    # after each rank's first (B of step 0, A and B of step 1):
    # 3 x (0.7 + 1.2 + 0.7) + (0.85 + 1.35 + 0.85) = 10.85 ms for 12 MiB
    # -> algbw 1.160, busbw x 2*3/4 = 1.740
    assert "all_reduce  0      0-3    dp        4     16  16,777,216  0.026800  0.019400" in text
    assert "1.160   1.740" in text
    # rank 0 per step: 800 (tp) + 2500 (two overlapping buckets) + 400 + 200 us = 3.9 ms
    assert "   0       2    0.020000   0.007800       39.0      0.003800          19.0" in text
    # highlights over step 1 (step 0 left out): 14.85 ms of comm in 40 ms of rank-steps;
    # dp all-reduce 9.7 of 14.85 ms of service time
    assert "* communication covers 37.1% of step time over all ranks; 17.9% is exposed" in text
    assert "* top op: all_reduce on group 0 (4 ranks, dp), 65.3% of the service time" in text
    words = " ".join(text.split())  # prose wraps at the width
    assert "the costliest straggler is rank 3 (last to arrive 3 times;" in words
    assert "headline covers step 1 of 2 recorded steps; step 0, set-up" in words
    # rank 3 arrives 300 us late to both dp buckets: it is the top straggler
    assert "1      3          12                6            0.001400            116.7" in text


def test_cli_text_output_is_the_same(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from commlens.cli.main import main

    monkeypatch.chdir(DATA)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["report", "tiny_run", "--width", "100"]) == 0
    assert capsys.readouterr().out == EXPECTED.read_text()
    assert os.getcwd() == str(DATA)
