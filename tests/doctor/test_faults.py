"""Real gloo jobs, each with one injected fault (tests/doctor/faultprog.py), and doctor
naming it: under ``commlens trace --hang-timeout`` (the watchdog's own diagnosis, then
doctor on the run it left), and from the run left after the job was killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main
from commlens.launch.watchdog import HangWatchdog

PROG = Path(__file__).with_name("faultprog.py")
HANG_S = 3
LIMIT_S = 120


def _trace(run: Path, fault: str, nproc: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "commlens", "trace", "--out", str(run), "--nproc", str(nproc),
            *extra, "--", sys.executable, str(PROG), fault]  # fmt: skip


def _doctor(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["doctor", str(run), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _rank_pids(run: Path) -> list[int]:
    pids = []
    for path in run.glob("rank-*.json"):
        try:
            pids.append(int(json.loads(path.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            pass
    return pids


def watched(tmp_path: Path, fault: str, nproc: int) -> tuple[Path, str]:
    """The job under the watchdog with --kill-on-hang: the run and trace's stderr."""
    run = tmp_path / "watched"
    done = subprocess.run(
        _trace(run, fault, nproc, "--hang-timeout", str(HANG_S), "--kill-on-hang"),
        capture_output=True, text=True, timeout=LIMIT_S, check=False,
    )  # fmt: skip
    return run, done.stderr


def killed(tmp_path: Path, fault: str, nproc: int) -> Path:
    """The job with no watchdog, killed (launcher and ranks, SIGKILL) once it stopped
    moving with ops in flight; a job that ends by itself is left to end."""
    run = tmp_path / "killed"
    proc = subprocess.Popen(
        _trace(run, fault, nproc), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    observer = HangWatchdog(run, HANG_S, lambda _: None)  # only its reading of the files
    deadline = time.monotonic() + LIMIT_S
    last, since = None, time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            state = observer.state() if run.exists() else ((), False)
            if state != last:
                last, since = state, time.monotonic()
            elif state[1] and time.monotonic() - since > HANG_S:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in _rank_pids(run):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        proc.wait()
    time.sleep(0.5)  # the ranks' ends
    return run


def _both(
    tmp_path: Path, fault: str, nproc: int, capsys: pytest.CaptureFixture[str]
) -> list[tuple[str, dict[str, Any], int, str]]:
    run, stderr = watched(tmp_path, fault, nproc)
    code, data = _doctor(run, capsys)
    out = [("watched", data, code, stderr)]
    run = killed(tmp_path, fault, nproc)
    code, data = _doctor(run, capsys)
    out.append(("killed", data, code, ""))
    return out


def test_skipped_collective(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _both(tmp_path, "skip", 2, capsys)
    for how, data, code, _ in results:
        assert code == 1 and data["kind"] == "hang" and data["root_ranks"] == [1], how
        assert data["victims"] == [0]
        assert any("skipped one before" in line for line in data["explanation"]), how
    stderr = results[0][3]
    assert "hang: rank 1 at the root" in stderr and "no op finished for 3 s" in stderr
    # the last line says the watchdog's kill ended the job, not a failure of the job's own
    last = stderr.strip().splitlines()[-1]
    assert "killed by the hang watchdog (--kill-on-hang)" in last and "ranks 0-1" in last, last
    assert "exit code" not in last and "SIGKILL" not in last, last


def test_all_reduce_of_another_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _both(tmp_path, "size", 3, capsys)
    for how, data, code, _ in results:
        assert code == 1 and data["kind"] == "desync" and data["root_ranks"] == [2], how
        sizes = {m["rank"]: m["bytes"] for m in data["mismatch"]}
        assert sizes == {0: 16, 1: 16, 2: 20}, how
        assert {m["seq"] for m in data["mismatch"]} == {3}
    stderr = results[0][3]
    assert "desync: on group 0, collective #3: rank 2 called all_reduce 5 elements" in stderr


def test_two_groups_in_opposite_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for how, data, code, _ in _both(tmp_path, "order", 2, capsys):
        assert code == 1 and data["kind"] == "hang", how
        assert data["cycle"] == [0, 1] and data["root_ranks"] == [0, 1], how
        groups = {w["rank"]: w["group"] for w in data["waits"]}
        assert groups[0] != groups[1]  # each waits in the group the other never joined


def test_send_recv_deadlock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for how, data, code, _ in _both(tmp_path, "p2p", 2, capsys):
        assert code == 1 and data["kind"] == "hang" and data["cycle"] == [0, 1], how
        assert {(w["rank"], w["op"], w["peer"]) for w in data["waits"]} == {
            (0, "recv", 1), (1, "recv", 0)
        }  # fmt: skip


def test_straggler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for how, data, code, stderr in _both(tmp_path, "straggler", 2, capsys):  # stderr: '' if killed
        assert code == 1 and data["kind"] == "straggler" and data["root_ranks"] == [1], how
        row = data["stragglers"][0]
        assert row["last_count"] == row["instances"] == 8
        # it sleeps 60 ms where the other sleeps 20: the other waits at least most of 40 ms
        assert row["blame_per_step_s"] >= 0.03 and row["cost_share"] >= 0.2, row
        assert "no op finished" not in stderr
        assert "; steady: late by" in data["explanation"][0], how  # every step alike


def test_rank_killed_mid_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for how, data, code, _ in _both(tmp_path, "kill", 2, capsys):
        assert code == 1 and data["kind"] == "dead_rank" and data["root_ranks"] == [1], how
        assert 1 in data["dead_ranks"]
        launcher = json.loads((tmp_path / how / "run.json").read_text()).get("launcher", {})
        if "exit_codes" in launcher:  # the job ended: its launcher saw how rank 1 ended
            assert data["ranks"]["1"]["signal"] == "SIGKILL", how
        else:  # killed before: rank 0's all-reduce failed on the closed connection
            assert any("it is gone" in line for line in data["explanation"]), how
        state = {(g["rank"], g["last_completed"]) for g in data["groups"]}
        assert (0, "all_reduce #3") in state and (1, "all_reduce #3") in state, how


def test_rank_spinning_with_the_gil(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _both(tmp_path, "gil", 2, capsys)
    for how, data, code, _ in results:
        assert code == 1 and data["kind"] == "hang" and data["root_ranks"] == [1], how
    how, data, _, stderr = results[0]
    assert "in spin" in data["stacks"]["1"]  # the watchdog's dump of the spinning rank
    assert any("in spin" in line for line in data["explanation"] if line.startswith("rank 1"))
    assert "in spin" in stderr


def _line_of(marker: str) -> str:
    """``faultprog.py:N`` of the line that holds ``marker``."""
    lines = PROG.read_text().splitlines()
    return f"{PROG}:{next(i for i, line in enumerate(lines, 1) if marker in line)}"


def test_desync_among_completed_ops_names_each_call_site(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both all_reduces complete (as many bytes), so neither is in flight: each rank's call
    site comes from its call-site files."""
    run = tmp_path / "run"
    done = subprocess.run(
        _trace(run, "dtype", 2), capture_output=True, text=True, timeout=LIMIT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    assert not any(run.glob("inflight-*.json")) or all(
        not json.loads(p.read_text())["ops"] for p in run.glob("inflight-*.json")
    )  # nothing was in flight at the end: the sites below are completed ops'
    code, data = _doctor(run, capsys)
    assert code == 1 and data["kind"] == "desync" and data["root_ranks"] == [1]
    usual, odd = _line_of("# the usual call"), _line_of("# the odd call")
    sites = {m["rank"]: m["site"] for m in data["mismatch"]}
    assert sites == {0: f"{usual} main", 1: f"{odd} main"}, sites
    assert {m["dtype"] for m in data["mismatch"]} == {"float32", "int32"}
    capsys.readouterr()
    assert main(["doctor", str(run)]) == 1
    text = capsys.readouterr().out
    assert f"rank 0: all_reduce 4 elements float32 (16 B) at {usual} main" in text, text
    assert f"rank 1: all_reduce 4 elements int32 (16 B) at {odd} main" in text, text
