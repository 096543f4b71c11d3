"""doctor without jobs: the hang watchdog over files written by hand, bad input, a
healthy checked-in run."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.launch.watchdog import HangWatchdog
from commlens.trace.layout import inflight_path

ROOT = Path(__file__).resolve().parents[2]
GLOO_FR = ROOT / ".." / "shared" / "traces" / "flight_recorder" / "generated-gloo-cpu"


def _write(run: Path, rank: int, events: int, ops: list[dict[str, object]]) -> None:
    data = {"format": "commlens-inflight", "rank": rank, "events": events, "ops": ops}
    inflight_path(run, rank).write_text(json.dumps(data))


def test_watchdog_fires_once_per_stall_and_keeps_the_job(tmp_path: Path) -> None:
    fired: list[float] = []
    _write(tmp_path, 0, 5, [{"op": "all_reduce", "pg_name": "0", "t_issue_ns": 1}])
    _write(tmp_path, 1, 4, [])
    dog = HangWatchdog(tmp_path, 0.3, lambda _: fired.append(time.monotonic()), poll_s=0.05)
    with dog:
        time.sleep(1.0)  # stalled with an op in flight: fires once, not again
        assert len(fired) == 1
        _write(tmp_path, 1, 5, [])  # the job moves
        time.sleep(0.15)
        _write(tmp_path, 0, 6, [])  # nothing in flight: an idle job is no hang
        time.sleep(0.8)
        assert len(fired) == 1
        _write(tmp_path, 0, 7, [{"op": "recv", "pg_name": "0", "t_issue_ns": 2}])
        time.sleep(1.0)  # stalled again: fires again
    assert len(fired) == 2
    note = json.loads((tmp_path / "run.json").read_text())["hang"]
    assert note["killed"] is False and note["killed_ranks"] == []


def test_kill_on_hang_needs_a_timeout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["trace", "--out", str(tmp_path / "r"), "--kill-on-hang", "--", "true"]) == 2
    assert "--kill-on-hang needs --hang-timeout" in capsys.readouterr().err
    assert main(["trace", "--out", str(tmp_path / "r"), "--hang-timeout", "0", "--", "true"]) == 2
    assert "positive number of seconds" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not GLOO_FR.is_dir(), reason="../shared/traces is not here")
def test_one_rank_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(GLOO_FR / "rank_0", tmp_path / "rank_0")
    assert main(["doctor", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one rank only" in err[0]


def test_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "nothing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_healthy_run_says_its_largest_wait(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(ROOT / "tests" / "data" / "tiny_run")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("healthy: ") and "the largest wait: 0.500 ms" in first


def test_stragglers_of_one_node() -> None:
    from commlens.doctor import diagnose
    from commlens.doctor.model import Evidence, RankFacts

    def row(rank: int, last: int) -> dict[str, float]:
        return {"rank": rank, "instances": 10, "last_count": last, "blame_s": 1.0,
                "blame_per_step_s": 0.05 if last else 0.0, "step_s": 0.1}  # fmt: skip

    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}
    ev = Evidence(
        "commlens run", "x", 4, {}, {r: [] for r in hosts},
        {r: RankFacts(r, status="ok", host=h) for r, h in hosts.items()},
        straggle=[row(0, 0), row(1, 0), row(2, 8), row(3, 7)],
    )  # fmt: skip
    diag = diagnose(ev)
    assert diag.kind == "straggler" and diag.root_ranks == [2, 3]
    assert diag.headline.endswith("all of node b")
    ev.straggle = [row(0, 0), row(1, 0), row(2, 8), row(3, 0)]
    assert diagnose(ev).headline.endswith("arrives last, step after step")


def test_straggler_trend() -> None:
    from commlens.doctor.straggle import trend

    steady = [(s, 0.040 + 0.001 * (s % 2)) for s in range(8)]
    assert trend(steady).startswith("steady: late by 40.")
    drifting = [(s, 0.010 * (s + 1)) for s in range(9)]
    assert trend(drifting) == (
        "drifting: late by 20.0 ms a collective in its first steps, 80.0 ms in its last"
    )
    assert trend(drifting[:2]) == ""
