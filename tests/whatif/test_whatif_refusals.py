"""``commlens whatif`` refuses what it cannot replay with one line, on the checked-in tiny run."""

from __future__ import annotations

import shutil
from pathlib import Path

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
    assert "rank(s) 1 missing or unreadable; a replay needs every rank's events" in err


def test_a_rank_that_stopped_early(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy / "rank-00001.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 2), path)
    err = one_error(capsys, ["whatif", str(copy), "--net", "tcp-10g"])
    assert "issued different numbers of collectives" in err and "stopped early" in err
