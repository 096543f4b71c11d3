"""Launchers never leave processes behind and say which rank failed first.

The jobs are ``sleepprog.py`` processes (no torch), started through the real
``commlens`` command in a subprocess of its own session, so signals sent to it
never reach the test runner. A process counts as gone when ``/proc`` has it no
more or shows it as a zombie (an orphan waiting for init to reap it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commlens.cli import run as run_cli
from commlens.cli.main import main
from commlens.launch import launch_ranks
from tests.netem.helpers import leftovers, needs_netns

PROG = str(Path(__file__).parents[1] / "capture" / "sleepprog.py")
COMMLENS = [sys.executable, "-m", "commlens"]
ROUNDS = 3  # each signal test runs several times: passing once is not luck


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def marked(marks: Path) -> list[int]:
    """Pids of the processes that wrote a mark (``pid-WHO-PID``) in ``marks``."""
    return [int(p.name.rsplit("-", 1)[1]) for p in marks.glob("pid-*")]


def wait_until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def start(*args: str) -> subprocess.Popen[str]:
    """``commlens ARGS...`` in a session of its own."""
    return subprocess.Popen(
        [*COMMLENS, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def started(proc: subprocess.Popen[str], marks: Path, count: int) -> list[int]:
    """The pids of the job's ``count`` processes, once they all run."""
    ok = wait_until(lambda: len(marked(marks)) == count or proc.poll() is not None, 60)
    if not ok or proc.poll() is not None:
        proc.kill()
        raise AssertionError(proc.communicate()[1])
    return marked(marks)


def all_gone(pids: list[int]) -> bool:
    return wait_until(lambda: not any(alive(pid) for pid in pids), 5)


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "run.json").read_text())
    return data


def trace_ranks(out: Path, marks: Path, *extra: str) -> list[str]:
    job = [sys.executable, PROG, str(marks), "sleep"]
    return ["trace", "--out", str(out), "--nproc", "2", *extra, "--", *job]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_launcher_leaves_no_rank_running(tmp_path: Path, sig: signal.Signals) -> None:
    for i in range(ROUNDS):
        out, marks = tmp_path / f"run{i}", tmp_path / f"marks{i}"
        marks.mkdir()
        proc = start(*trace_ranks(out, marks))
        ranks = started(proc, marks, 2)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=30)
        assert all_gone(ranks), ranks
        if sig == signal.SIGKILL:  # the kernel stops the ranks (parent-death signal)
            assert proc.returncode == -signal.SIGKILL
            continue
        # SIGTERM: the launcher stops the ranks, records it, exits as a shell would say
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err
        launcher = manifest(out)["launcher"]
        assert launcher["stopped_by"] == "SIGTERM" and launcher["exit_code"] == 143
        assert launcher["exit_codes"] == [-signal.SIGTERM, -signal.SIGTERM]


@needs_netns
def test_killed_launcher_leaves_no_rank_in_emulated_nodes(tmp_path: Path) -> None:
    # ranks run under `ip netns exec`, which execs them in place: they keep the
    # parent-death signal the launcher gave them
    before = leftovers()
    for i in range(2):
        out, marks = tmp_path / f"run{i}", tmp_path / f"marks{i}"
        marks.mkdir()
        proc = start(*trace_ranks(out, marks, "--nodes", "2"))
        ranks = started(proc, marks, 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        assert all_gone(ranks), ranks
        assert wait_until(lambda: leftovers() - before == set(), 20)


def test_sigterm_of_trace_stops_the_whole_job_and_records_it(tmp_path: Path) -> None:
    for i in range(ROUNDS):
        out, marks = tmp_path / f"run{i}", tmp_path / f"marks{i}"
        marks.mkdir()
        job = [sys.executable, PROG, str(marks), "spawn", "2"]
        proc = start("trace", "--out", str(out), "--", *job)
        pids = started(proc, marks, 3)  # the wrapper and its two children
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert all_gone(pids), pids
        assert proc.returncode == 128 + signal.SIGTERM, err  # the job's own end
        data = manifest(out)
        assert data["command"] == job
        assert data["launcher"]["exit_code"] == 143
        assert data["launcher"]["signal"] == "SIGTERM"
        assert data["launcher"]["stopped_by"] == "SIGTERM"
        assert "wall_s" in data["launcher"]
        assert err.strip().splitlines()[-1].endswith("(exit code 143, stopped by SIGTERM)")


def test_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    # run_job in a process of its own (it takes over this process's SIGTERM)
    code = (
        "import sys; from commlens.launch import run_job; "
        "r = run_job(sys.argv[1:], grace_s=0.5); print(r.returncode, r.stop_signal)"
    )
    for i in range(ROUNDS):
        marks = tmp_path / f"marks{i}"
        marks.mkdir()
        job = [sys.executable, PROG, str(marks), "spawn", "2", "ignore-term"]
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *job],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        pids = started(proc, marks, 3)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert all_gone(pids), pids
        assert out.split() == [str(-signal.SIGTERM), str(int(signal.SIGTERM))]
        assert 0.4 < time.monotonic() - t0 < 10  # the children outlived SIGTERM, not the grace


def test_first_rank_to_fail_is_named(tmp_path: Path) -> None:
    for i in range(ROUNDS):
        marks = tmp_path / f"marks{i}"
        marks.mkdir()
        result = launch_ranks([sys.executable, PROG, str(marks), "rank1-dies"], 2, grace_s=0.3)
        # rank 0 ignored the launcher's SIGTERM and was killed too, after the grace
        assert result.exit_codes == [-signal.SIGKILL, -signal.SIGKILL]
        assert result.first_failed == 1
        assert result.failure() == "rank 1 was killed by SIGKILL"
        assert result.exit_code == 128 + signal.SIGKILL


def test_run_names_the_rank_that_failed_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()

    def ranks_where_rank1_dies(_argv: list[str], nproc: int, **kwargs: Any) -> Any:
        argv = [sys.executable, PROG, str(marks), "rank1-dies"]
        return launch_ranks(argv, nproc, **{**kwargs, "grace_s": 0.3})

    monkeypatch.setattr(run_cli, "launch_ranks", ranks_where_rank1_dies)
    out = tmp_path / "run"
    code = main(["run", "--model", "gpt-tiny", "--scheme", "dp", "--out", str(out)])
    assert code == 128 + signal.SIGKILL
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("commlens run: error: training failed: rank 1 was killed by SIGKILL")


def _rank_pids(out: Path) -> list[int]:
    """Processes whose command line names ``out`` (the ranks of that run)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if os.fsencode(str(out)) in cmdline and b"commlens.workloads.worker" in cmdline:
                pids.append(int(entry))
    return pids


def test_ctrl_c_of_run_is_one_line_and_stops_the_ranks(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "--model", "gpt-tiny", "--scheme", "dp", "--steps", "100000"]
    proc = subprocess.Popen(
        [*COMMLENS, *args, "--seq-len", "16", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # training is under way once a step is reported
        if line.startswith("step "):
            break
    ranks = _rank_pids(out)
    assert len(ranks) == 2
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["commlens run: interrupted"], err
    assert all_gone(ranks)


def test_ranks_get_one_thread_each_unless_the_caller_chose(tmp_path: Path) -> None:
    # torchrun's rule: several ranks on one machine each get OMP_NUM_THREADS=1
    # (their intra-op threads would otherwise each take every core); the caller's
    # own setting wins, and a single rank keeps torch's default
    write = "import os, sys; open(sys.argv[1] + os.environ['RANK'], 'w').write("
    write += "os.environ.get('OMP_NUM_THREADS', '-'))"
    argv = [sys.executable, "-c", write, str(tmp_path / "threads")]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    for nproc, extra, expect in ((2, {}, "1"), (2, {"OMP_NUM_THREADS": "3"}, "3"), (1, {}, "-")):
        for f in tmp_path.glob("threads*"):
            f.unlink()
        assert launch_ranks(argv, nproc, env={**env, **extra}).exit_code == 0
        got = [(tmp_path / f"threads{r}").read_text() for r in range(nproc)]
        assert got == [expect] * nproc
