"""``commlens trace`` on unmodified scripts, through every way a job is launched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import commlens
from commlens.cli.main import main
from commlens.launch import free_port

PROG = str(Path(__file__).parents[1] / "capture" / "tracedprog.py")
BIN = Path(sys.executable).parent


def _commlens(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("commlens", path=str(BIN)) or "commlens"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=240)


def _check(out: Path, world: int) -> None:
    run = commlens.load_run(out)
    assert run.ranks == list(range(world)) and not run.warnings
    assert run.manifest["world_size"] == world
    assert (out / "run.json").exists()
    for rank in range(world):
        assert (out / f"rank-{rank:05d}.parquet").exists()
    counts = (
        run.duckdb().execute("select op, count(*) from events group by op order by op").fetchall()
    )
    assert counts == [("all_reduce", 3 * world), ("barrier", world)]


@pytest.mark.parametrize(
    "launcher",
    [
        [str(BIN / "torchrun"), "--nproc_per_node", "2", PROG],
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "3", PROG],
        [sys.executable, PROG, "spawn"],
    ],
    ids=["torchrun", "python-m-torch.distributed.run", "script-spawns-ranks"],
)
def test_trace_unmodified_script(tmp_path: Path, launcher: list[str]) -> None:
    out = tmp_path / "run"
    if launcher[-1] == "spawn":
        launcher = [*launcher, str(free_port())]
    done = _commlens("trace", "--out", str(out), "--", *launcher)
    assert done.returncode == 0, done.stderr
    world = 3 if "3" in launcher else 2
    _check(out, world)
    manifest = commlens.load_run(out).manifest
    assert manifest["command"] == launcher and manifest["launcher"]["exit_code"] == 0


def test_trace_starts_ranks_itself(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["trace", "--out", str(out), "--nproc", "2", "--", sys.executable, PROG]) == 0
    _check(out, 2)


def test_trace_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["trace", "--out", str(out)]) == 2
    assert "no command to trace" in capsys.readouterr().err
    assert main(["trace", "--out", str(out), "--", "no-such-program-xyz"]) == 2
    assert "command not found" in capsys.readouterr().err
    assert main(["trace", "--out", str(out), "--nproc", "2", "--", sys.executable, PROG]) == 0
    capsys.readouterr()
    assert main(["trace", "--out", str(out), "--", sys.executable, PROG]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a run" in err[0]


def test_failing_job_keeps_its_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(["trace", "--out", str(out), "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert code == 3


needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("tc") is None,
    reason="emulated nodes need root, iproute2 and tc (CI runs as root)",
)


@needs_root
def test_trace_on_emulated_nodes_records_topology(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["trace", "--out", str(out), "--nproc", "2", "--nodes", "2", "--link", "1gbit"]
    assert main([*args, "--", sys.executable, PROG]) == 0
    _check(out, 2)
    run = commlens.load_run(out)
    assert run.manifest["topology"]["nodes"] == 2
    assert run.manifest["topology"]["link_bits_per_s"] == 1_000_000_000
    assert (out / "nic.parquet").exists()


def test_trace_link_without_root_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    out = tmp_path / "run"
    args = ["trace", "--out", str(out), "--nproc", "2", "--nodes", "2", "--link", "1gbit"]
    assert main([*args, "--", sys.executable, PROG]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root" in err[0]
    assert not out.exists()  # nothing half-written
    assert main(["trace", "--out", str(out), "--link", "1gbit", "--", sys.executable, PROG]) == 2
    assert "need --nproc" in capsys.readouterr().err
