"""``export --ranks/--group/--all-ranks`` on a generated 72-rank run (more than the
64 tracks exported without a selection)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from commlens.analysis import open_run
from commlens.cli.export import TRACK_LIMIT
from commlens.cli.main import main
from commlens.trace.synthetic import Planted, Spec, generate

SPEC = Spec(tp=2, pp=2, dp=18, ranks_per_node=8, steps=1, microbatches=1, layers=1)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Planted]:
    out = tmp_path_factory.mktemp("export") / "run72"
    return out, generate(out, SPEC)


def _pids(path: Path) -> set[int]:
    events = json.loads(path.read_text())["traceEvents"]
    return {e["pid"] for e in events}


def test_wide_run_needs_a_selection(
    run: tuple[Path, Planted], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert SPEC.world_size > TRACK_LIMIT
    out = tmp_path / "trace.json"
    assert main(["export", str(run[0]), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "72 ranks would be 72 process tracks" in err[0]
    assert "--ranks 0-7" in err[0] and "--all-ranks" in err[0] and "--group" in err[0]
    assert not out.exists()  # nothing half-written
    assert main(["export", str(run[0]), "--all-ranks", "-o", str(out)]) == 0
    assert _pids(out) == set(range(72))


def test_rank_selection(
    run: tuple[Path, Planted], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.json"
    assert main(["export", str(run[0]), "--ranks", "0-3,40", "-o", str(out)]) == 0
    assert "of ranks 0-3,40 to" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert _pids(out) == {0, 1, 2, 3, 40}
    assert data["otherData"]["ranks"] == "0-3,40"
    ops = Counter(e["pid"] for e in data["traceEvents"] if e["ph"] == "X")
    with open_run(run[0]) as view:
        rows = view.sql("SELECT rank, count(*) AS n FROM events GROUP BY rank").to_pylist()
    counts = {row["rank"]: row["n"] for row in rows}
    assert ops == {r: counts[r] for r in (0, 1, 2, 3, 40)}  # every op of these ranks


def test_group_selection(run: tuple[Path, Planted], tmp_path: Path) -> None:
    _, planted = run
    out = tmp_path / "trace.json"
    # groups are named in creation order: "0" the world, then tp, dp, pp
    dp_first = str(1 + len(planted.groups["tp"]))
    assert main(["export", str(run[0]), "--group", dp_first, "-o", str(out)]) == 0
    assert _pids(out) == set(planted.groups["dp"][0])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ranks", "3-1"], "holds no rank"),
        (["--ranks", "x"], "is not a rank list"),
        (["--ranks", "70-80"], "ranks 72-80 not in the run"),
        (["--group", "nope"], "no op of the run is in a group of that name"),
    ],
)
def test_bad_selection(
    run: tuple[Path, Planted],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    out = tmp_path / "trace.json"
    with pytest.raises(SystemExit) as stop:
        code = main(["export", str(run[0]), *args, "-o", str(out)])
        raise SystemExit(code)
    assert stop.value.code == 2
    assert says in capsys.readouterr().err
    assert not out.exists()
