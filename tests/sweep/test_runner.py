"""The runner without full runs: failures recorded and retried, skips kept, one sweep per dir."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.sweep import open_catalog, parse_spec, run_sweep
from commlens.sweep.catalog import read_point
from tests.sweep.helpers import GRID


def test_a_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []

    def listener(event: str, point: Any, rec: dict[str, Any] | None) -> None:
        events.append((event, point.scheme))

    out = tmp_path / "s"
    outcome = run_sweep(parse_spec(GRID), out, listener)
    assert not outcome.ok and len(outcome.failed) == 1 and len(outcome.skipped) == 1
    assert events == [("start", "dp"), ("done", "dp"), ("done", "tp")]
    dp = read_point(out, outcome.failed[0])
    assert dp is not None and dp["status"] == "failed"
    assert dp["error"] == "timed out after 1 s"
    assert (
        (out / "points" / outcome.failed[0] / "run.log")
        .read_text()
        .startswith("$ commlens run --model gpt-tiny --scheme dp --nproc 3")
    )
    tp = read_point(out, outcome.skipped[0])
    assert tp is not None and tp["status"] == "skipped" and "head" in tp["error"]
    rows = open_catalog(out).execute("SELECT scheme, status, error FROM points").fetchall()
    assert rows == [("dp", "failed", dp["error"]), ("tp", "skipped", tp["error"])]
    # a new start runs the failed point again and keeps the skipped one
    events.clear()
    again = run_sweep(parse_spec(GRID), out, listener)
    assert events[0] == ("start", "dp") and again.reused == outcome.skipped


def test_cli_exit_code_and_summary_of_a_sweep_with_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "t.toml"
    spec.write_text(GRID)
    html = tmp_path / "r.html"
    assert main(["sweep", str(spec), "--out", str(tmp_path / "s"), "--report", str(html)]) == 1
    out = capsys.readouterr().out
    assert "failed" in out and "timed out after 1 s" in out
    assert "2 points · 0 run now · 0 already done · 1 skipped · 1 failed" in out
    assert "catalog:" in out and f"report: {html}" in out
    assert "timed out after 1 s" in html.read_text()


def test_one_sweep_at_a_time_per_directory(tmp_path: Path) -> None:
    out = tmp_path / "s"
    (out / "points").mkdir(parents=True)
    (out / "sweep.toml").write_text(GRID)
    with open(out / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UsageError, match="another commlens sweep is running"):
            run_sweep(parse_spec(GRID), out)


def test_emulated_points_need_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    text = GRID.replace("nproc = 3", 'nproc = 4\nnodes = 2\nlink = "1gbit"')
    with pytest.raises(UsageError, match="need root"):
        run_sweep(parse_spec(text), tmp_path / "s")
    assert not (tmp_path / "s").exists()
