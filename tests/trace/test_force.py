"""--force replaces only a commlens run, and only commlens's own files in it;
a bad --out is one line, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from commlens import load_run
from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.sweep.catalog import clear_sweep
from commlens.trace.live import LiveLock
from commlens.trace.rundir import prepare_run_dir, remove_run_dir

DATA = Path(__file__).parent.parent / "data"
COMMLENS = shutil.which("commlens", path=str(Path(sys.executable).parent)) or "commlens"
RUN_ARGS = ["run", "--model", "gpt-tiny", "--scheme", "dp", "--nproc", "2", "--steps", "2"]


def _run_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / "run"))


def _user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "thesis"
    (folder / "chapters").mkdir(parents=True)
    (folder / "chapters" / "one.tex").write_text("precious")
    (folder / "notes.txt").write_text("precious")
    return folder


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _one_error_line(err: str, cmd: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"commlens {cmd}: error: "), err
    return lines[0]


def test_force_replaces_a_run_with_every_file_commlens_writes(tmp_path: Path) -> None:
    run = _run_copy(tmp_path)
    parts = run / ".rank-00000.parts"
    parts.mkdir()
    (parts / "sites.jsonl").write_text("")
    (parts / "part-000000.bin").write_bytes(b"x")
    for name in (
        ".run.lock",
        "nic.parquet",
        ".run.json.123.ab12cd34.tmp",
        ".rank-00001.parquet.tmp",
    ):
        (run / name).write_bytes(b"")
    with prepare_run_dir(run, force=True):  # the new run's live lock is all that is left
        assert run.is_dir() and [p.name for p in run.iterdir()] == [".run.live"]


def test_force_refuses_a_run_holding_a_foreign_file(tmp_path: Path) -> None:
    run = _run_copy(tmp_path)
    (run / "analysis.ipynb").write_text("mine")
    before = _listing(run)
    with pytest.raises(UsageError, match=r"analysis\.ipynb"):
        prepare_run_dir(run, force=True)
    assert _listing(run) == before


@pytest.mark.parametrize("manifest", [None, "not json", {"format": "someone-else"}])
def test_force_refuses_a_directory_that_is_not_a_run(
    tmp_path: Path, manifest: object, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _user_folder(tmp_path)
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (folder / "run.json").write_text(text)
    (folder / "rank-00000.parquet").write_bytes(b"PAR1")
    before = _listing(folder)
    cmd = ["trace", "--force", "--out", str(folder), "--", sys.executable, "-c", "pass"]
    assert main(cmd) == 2
    assert "not a commlens run" in _one_error_line(capsys.readouterr().err, "trace")
    assert _listing(folder) == before
    assert main([*RUN_ARGS, "--force", "--out", str(folder)]) == 2
    assert "not a commlens run" in _one_error_line(capsys.readouterr().err, "run")
    assert _listing(folder) == before


def test_a_symlinked_file_in_a_run_is_not_followed(tmp_path: Path) -> None:
    run = _run_copy(tmp_path)
    victim = _user_folder(tmp_path) / "notes.txt"
    (run / "rank-00009.json").symlink_to(victim)
    with pytest.raises(UsageError, match=r"rank-00009\.json"):
        prepare_run_dir(run, force=True)
    assert victim.read_text() == "precious" and (run / "run.json").exists()


def test_run_out_an_existing_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "report.txt"
    file.write_text("precious")
    assert main([*RUN_ARGS, "--out", str(file)]) == 2
    assert "not a directory" in _one_error_line(capsys.readouterr().err, "run")
    assert file.read_text() == "precious"


def test_trace_out_under_proc_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = ["trace", "--out", "/proc/commlens-run", "--", sys.executable, "-c", "pass"]
    assert main(cmd) == 2
    assert "cannot write there" in _one_error_line(capsys.readouterr().err, "trace")


def test_trace_out_on_a_read_only_mount_is_one_line(
    tmp_path: Path,
    readonly_dir: Callable[[Path], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ro = readonly_dir(tmp_path / "ro")
    for out in (ro, ro / "run"):
        cmd = ["trace", "--out", str(out), "--", sys.executable, "-c", "pass"]
        assert main(cmd) == 2
        line = _one_error_line(capsys.readouterr().err, "trace")
        assert "Read-only" in line
    assert list(ro.iterdir()) == []


def test_demo_fresh_removes_only_a_sweeps_own_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "demo" / "sweep"
    point = sweep / "points" / "gpt-tiny_dp"
    shutil.copytree(DATA / "tiny_run", point / "run")
    (sweep / "sweep.toml").write_text("")
    (point / "point.json").write_text("{}")
    (point / "run.log").write_text("")
    (sweep / "points" / "gpt-tiny_dp" / "run" / "mine.csv").write_text("precious")
    before = _listing(sweep)
    cmd = ["demo", "--out", str(tmp_path / "demo"), "--fresh", "--loopback"]
    assert main(cmd) == 2
    line = _one_error_line(capsys.readouterr().err, "demo")
    assert "points/gpt-tiny_dp/run/mine.csv" in line
    assert _listing(sweep) == before
    (point / "run" / "mine.csv").unlink()
    clear_sweep(sweep)
    assert list(sweep.iterdir()) == []
    with pytest.raises(UsageError, match="not a commlens sweep"):
        clear_sweep(_user_folder(tmp_path))


def test_trace_force_replaces_its_own_earlier_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    cmd = ["trace", "--out", str(out), "--", sys.executable, "-c", "pass"]
    assert main(cmd) == 0
    capsys.readouterr()
    (out / "rank-00007.json").write_text("{}")  # a stale file of an earlier, larger run
    assert main(cmd) == 2
    assert "already holds a run" in _one_error_line(capsys.readouterr().err, "trace")
    assert main([*cmd[:1], "--force", *cmd[1:]]) == 0
    assert not (out / "rank-00007.json").exists()
    assert json.loads((out / "run.json").read_text())["format"] == "commlens-run"


STEP_PROG = str(Path(__file__).with_name("stepprog.py"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMLENS, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_force_never_replaces_a_run_still_being_written(tmp_path: Path) -> None:
    """Issue 31 item 1: a single-node job traced into R, steps still running; then
    ``trace --force`` and ``run --force`` into R from another shell are refused, the job
    ends well with both ranks and its own command; once it has ended --force replaces it."""
    out, signals = tmp_path / "R", tmp_path / "signals"
    signals.mkdir()
    job = subprocess.Popen(
        [COMMLENS, "trace", "--nproc", "2", "--out", str(out), "--", sys.executable, STEP_PROG,
         str(signals)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (signals / "ready").exists():
            assert job.poll() is None, job.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the job never took a step"
            time.sleep(0.05)
        before = sorted(p.name for p in out.iterdir())
        assert ".rank-00000.parts" in before and "rank-00001.json" in before
        for cmd in (
            ["trace", "--force", "--out", str(out), "--", sys.executable, "-c", "1"],
            [*RUN_ARGS, "--force", "--out", str(out)],
        ):
            done = _cli(*cmd)
            line = _one_error_line(done.stderr, cmd[0])
            assert done.returncode == 2 and "still being written" in line, done.stderr
            assert "pid" in line  # the process that writes it, from the live lock
        assert set(before) <= {p.name for p in out.iterdir()}  # nothing removed; the job writes on
        (signals / "stop").write_text("1")
        _, err = job.communicate(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 0, err[-3000:]
    assert "recording stopped" not in err and "(ok)" in err, err[-3000:]
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["command"] == [sys.executable, STEP_PROG, str(signals)]
    done = _cli("report", str(out))
    assert done.returncode == 0 and "missing" not in done.stderr, done.stderr
    run = load_run(out)
    assert run.ranks == [0, 1] and not run.warnings
    # ended: the live lock is free again, so --force replaces the run
    done = _cli("trace", "--force", "--out", str(out), "--", sys.executable, "-c", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "run.json").read_text())["command"] == [sys.executable, "-c", "1"]


def test_removing_a_left_run_dir_takes_its_live_lock_and_never_a_live_one(tmp_path: Path) -> None:
    """A sweep point's or an import's old run goes whole, its live lock with it; a run
    that a writer still holds stays."""
    run = _run_copy(tmp_path)
    held = LiveLock(run).share()
    with pytest.raises(UsageError, match="still being written"):
        remove_run_dir(run, "point run", require_manifest=False)
    assert (run / "run.json").exists()
    held.release()
    remove_run_dir(run, "point run", require_manifest=False)
    assert not run.exists()
