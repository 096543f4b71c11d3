"""``commlens whatif`` refuses what it cannot replay with one line, on the checked-in tiny run."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.cli.main import main

TINY = Path(__file__).parents[1] / "data" / "tiny_run"


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("commlens whatif: error: "), err
    return err


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(TINY, out)
    return out


def test_unknown_or_bad_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = ["whatif", str(TINY), "--net", "tcp-10g"]
    err = one_error(capsys, [*run, "--profile", "warp-drive"])
    assert "unknown network profile 'warp-drive'; built-ins: loopback" in err
    err = one_error(capsys, [*run, "--profile", str(tmp_path / "nope.toml")])
    assert "nope.toml does not exist" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("latency_s = [\n")
    assert "is not valid TOML" in one_error(capsys, ["whatif", str(TINY), "--net", str(bad)])
    assert "unknown network profile 'warp'" in one_error(capsys, [*run, "--intra", "warp"])
    assert "no network profile given" in one_error(capsys, ["whatif", str(TINY), "--net", ""])
    err = one_error(capsys, ["whatif", str(TINY), "--net", "5zz"])
    assert "bad link rate '5zz'" in err


def test_no_run_or_a_damaged_rank(
    tmp_path: Path, copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = one_error(capsys, ["whatif", str(tmp_path / "absent"), "--net", "tcp-10g"])
    assert "no such run directory" in err
    rank = copy / "rank-00001.parquet"
    rank.write_bytes(rank.read_bytes()[: rank.stat().st_size // 2])
    err = one_error(capsys, ["whatif", str(copy), "--net", "tcp-10g"])
    assert "rank(s) 1 missing or unreadable (rank-00001.parquet is truncated" in err
    assert "a replay needs every rank's events" in err


def _edit(path: Path, **columns: Callable[[list[int]], list[int]]) -> None:
    """Rewrite the named columns of a rank file (its schema and metadata kept)."""
    table = pq.read_table(path)
    for name, change in columns.items():
        i = table.schema.get_field_index(name)
        field = table.schema.field(i)
        table = table.set_column(
            i, field, pa.array(change(table.column(i).to_pylist()), field.type)
        )
    pq.write_table(table, path)


YEARS = 3 * 365 * 86_400 * 10**9


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"t_issue_ns": lambda v: [0] * len(v), "t_end_ns": lambda v: [0] * len(v)},
            "rank 1, step 0: 12 event(s) lie outside the rank's recording, up to 53.9 years",
        ),
        (
            {
                "t_issue_ns": lambda v: [t - YEARS for t in v],
                "t_end_ns": lambda v: [t - YEARS for t in v],
            },
            "rank 1, step 0: 12 event(s) lie outside the rank's recording, up to 3.0 years",
        ),
        (
            {"t_end_ns": lambda v: [t - 10**9 for t in v]},
            "rank 1, step 0: 12 event(s) end before they are issued",
        ),
    ],
)
def test_impossible_times_are_named_by_rank_and_step(
    copy: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], says: str
) -> None:
    # whatif replayed these with exit 0 (a rank's times all 0: a comm share of 406%)
    _edit(copy / "rank-00001.parquet", **change)
    err = one_error(capsys, ["whatif", str(copy), "--net", "tcp-10g"])
    assert says in err and "a replay of times that cannot be is no answer" in err
    assert main(["report", str(copy)]) == 0  # report warns and goes on, its shares cut
    captured = capsys.readouterr()
    assert f"commlens: warning: {says}" in captured.err


def test_a_step_window_that_ends_before_it_starts(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = copy / "rank-00002.json"
    data = json.loads(meta.read_text())
    window = data["steps"][1]
    window["t_start_ns"], window["t_end_ns"] = window["t_end_ns"], window["t_start_ns"]
    meta.write_text(json.dumps(data))
    err = one_error(capsys, ["whatif", str(copy), "--net", "tcp-10g"])
    assert "rank 2, step 1: its step window ends 0.010000 s before it starts; left out" in err
    assert main(["report", str(copy), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [r for r in report["rank_steps"] if r["rank"] == 2 and r["step"] == 1]
    assert rows[0]["step_source"] == "ops" and rows[0]["step_s"] >= 0  # the span of its ops


def test_sizes_out_of_bounds_are_named_as_such(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(copy / "rank-00001.parquet", size_bytes=lambda v: [2**62] * len(v))
    err = one_error(capsys, ["whatif", str(copy), "--net", "tcp-10g"])
    assert "rank-00001.parquet: size_bytes values 4611686018427387904" in err
    assert "out of bounds" in err


def test_a_rank_that_stopped_early(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy / "rank-00001.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 2), path)
    err = one_error(capsys, ["whatif", str(copy), "--net", "tcp-10g"])
    assert "issued different numbers of collectives" in err and "stopped early" in err
