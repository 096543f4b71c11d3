"""A sweep writes only under its --out: point ids and the sweep's name are safe
names, and a point skipped for a bad link does not stop the report."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.sweep import parse_spec, run_sweep
from commlens.sweep.catalog import point_dir, write_json
from commlens.sweep.grid import expand, safe_name
from tests.sweep.helpers import GRID

# dp runs (and is stopped by its 1 s timeout); tp asks for a hostile link and is skipped
HOSTILE = GRID + '[schemes.tp]\nnodes = 3\nlink = "../../../escaped"\n'

SAFE = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*$")


@pytest.mark.parametrize(
    "raw", ["../../x", "..", ".", "a/b", "/etc/passwd", "x" * 300, "", "a\nb", "<x>|*"]
)
def test_safe_name_is_one_plain_component(raw: str) -> None:
    name = safe_name(raw)
    assert SAFE.match(name) and ".." not in name and len(name) <= 120
    assert Path(name).name == name


def test_safe_name_keeps_readable_ids_and_separates_changed_ones() -> None:
    plain = "gpt-tiny_dp_dp2-tp1-pp1_s128_b2_k1_2n-2.5gbit"
    assert safe_name(plain) == plain
    assert safe_name("a/b") != safe_name("a-b") and safe_name("a/b") != safe_name("a:b")


def test_a_hostile_link_gives_a_safe_id_and_a_skipped_point() -> None:
    points = expand(parse_spec(HOSTILE))
    tp = next(p for p in points if p.scheme == "tp")
    assert tp.skip_reason and "/" not in tp.id and ".." not in tp.id
    assert tp.config()["link"] == "../../../escaped"  # the catalog keeps what was asked


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "", "x" * 101])
def test_an_unsafe_sweep_name_is_refused(name: str) -> None:
    with pytest.raises(UsageError, match="name"):
        parse_spec(HOSTILE.replace('name = "t"', f"name = {name!r}"))


@pytest.mark.e2e  # runs the sweep's points as child processes
def test_sweep_writes_only_under_out_and_stays_reportable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    out = work / "s"
    outcome = run_sweep(parse_spec(HOSTILE), out)
    assert len(outcome.skipped) == 1 and len(outcome.failed) == 1
    outside = [p for p in tmp_path.rglob("*") if out not in (p, *p.parents)]
    assert sorted(str(p.relative_to(tmp_path)) for p in outside) == ["a", "a/b", "a/b/c"]
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted(
        [*outcome.skipped, *outcome.failed]
    )
    report = tmp_path / "r.md"
    assert main(["report", str(out), "-o", str(report)]) == 0
    row = [line for line in report.read_text().splitlines() if "3 nodes, ../../../escaped" in line]
    assert len(row) == 1 and "skipped" in row[0] and "bad link rate" in row[0]
    assert main(["report", str(out), "--format", "json"]) == 0


def test_point_files_never_leave_the_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    (sweep / "points").mkdir(parents=True)
    for bad in ("../x", "..", "a/b"):
        with pytest.raises(UsageError):
            point_dir(sweep, bad)
    victim = tmp_path / "victim"
    victim.mkdir()
    (sweep / "points" / "p").symlink_to(victim)
    with pytest.raises(UsageError, match="outside"):
        point_dir(sweep, "p")
    pdir = sweep / "points" / "q"
    pdir.mkdir()
    (pdir / "point.json").symlink_to(victim / "point.json")
    with pytest.raises(UsageError, match="outside"):
        write_json(pdir / "point.json", {"status": "ok"})
    assert os.listdir(victim) == []
