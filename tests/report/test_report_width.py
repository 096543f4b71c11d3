"""A report of an 8-rank run fits 100 columns (--width 100 or COLUMNS=100)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main
from commlens.trace.synthetic import ev, write_run

WORLD = range(8)


def _events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for step in range(2):
        b = step * 10_000.0
        for r in WORLD:
            tp = [r - r % 2, r - r % 2 + 1]
            common = {"step": step, "pg_ranks": tp, "role": "tp", "size": 8192}
            events += [
                ev(r, "all_reduce", b + 1000, b + 1300, pg=str(1 + r // 2), phase="forward",
                   module="transformer.layers.0.attention.dense", **common),
                ev(r, "all_reduce", b + 4000, b + 4400 + 50 * r, pg="0", pg_ranks=list(WORLD),
                   role="dp", size=1 << 20, step=step, phase="backward", is_async=True),
            ]  # fmt: skip
    return events


def test_eight_rank_report_fits_100_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = write_run(
        tmp_path / "run8",
        _events(),
        world_size=8,
        steps={r: [(0.0, 10_000.0), (10_000.0, 20_000.0)] for r in WORLD},
        clock_offset_ns={3: 2000},
    )
    assert main(["report", str(run), "--width", "100"]) == 0
    by_flag = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["report", str(run)]) == 0
    by_env = capsys.readouterr().out
    assert by_flag == by_env
    lines = by_flag.splitlines()
    assert len(lines) > 60 and max(len(line.rstrip()) for line in lines) <= 100
    assert "0-7" in by_flag and "transformer.layers.0.attention.dense" in " ".join(lines)
