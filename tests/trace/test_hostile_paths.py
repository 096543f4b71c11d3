"""Hostile paths inside and around a run: nothing commlens reads or writes is followed
through a link it did not make, no read is unbounded or blocks, no output overwrites
what its command reads.

Each case builds its run from ``tests/data/tiny_run`` in the test's temporary
folder and plants a symlink to ``/dev/zero``, a FIFO, or a link to a file or
folder of the test's own. Commands run as subprocesses under a 4 GiB address
space cap, a 64 MiB file size cap and a timeout, so that even a commlens that
followed ``/dev/zero`` can neither exhaust the machine's memory nor fill its
disk: it fails the test instead.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.errors import CommlensError, UsageError
from commlens.trace.jobid import JobIdentity
from commlens.trace.layout import MANIFEST_LOCK
from commlens.trace.manifest import merge_manifest
from commlens.trace.rundir import join_run_dir
from commlens.trace.writer import EventWriter

DATA = Path(__file__).parent.parent / "data"
BIN = Path(sys.executable).parent
COMMLENS = shutil.which("commlens", path=str(BIN)) or "commlens"
ADDRESS_CAP = 4 << 30
FILE_CAP = 64 << 20
TIMEOUT_S = 60


def _capped() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_CAP, ADDRESS_CAP))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_CAP, FILE_CAP))


def _commlens(*args: str | Path) -> tuple[int, str]:
    """Run the CLI capped; (exit code, stderr). A hang or a kill fails the test."""
    try:
        done = subprocess.run(
            [COMMLENS, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=_capped,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"commlens {args[0]} hung for {TIMEOUT_S} s")
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-3000:]
    return done.returncode, done.stderr


def _one_line_error(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and ": error: " in lines[0], err[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def _tiny(tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / name))


def _zero(run: Path, name: str) -> Path:
    """``run/name`` -> /dev/zero (an endless file)."""
    (run / name).symlink_to("/dev/zero")
    return run / name


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a link's target (never followed)."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = p.read_bytes()
        elif not p.is_dir():
            out[key] = "special"
    return out


# -- item 2: every file read is a regular file of bounded size --------------------------


@pytest.mark.parametrize("name", ["node-00000.json", "job.json"])
def test_a_run_file_linked_to_dev_zero_is_not_read(tmp_path: Path, name: str) -> None:
    run = _tiny(tmp_path)
    _zero(run, name)
    code, err = _commlens("report", run)  # the link is not the run's: it is left out
    assert code == 0, err
    code, err = _commlens("merge", tmp_path / "joined", run)
    _one_line_error(code, err, name, "symlink")
    assert not (tmp_path / "joined").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".joined")]
    code, err = _commlens("trace", "--force", "--out", run, "--", sys.executable, "-c", "1")
    _one_line_error(code, err, name)
    assert (run / name).is_symlink() and (run / "rank-00000.parquet").exists()


def test_fifos_where_files_are_read_never_block(tmp_path: Path) -> None:
    run = _tiny(tmp_path)
    os.mkfifo(run / "node-00000.json")
    code, err = _commlens("merge", tmp_path / "joined", run)
    _one_line_error(code, err, "node-00000.json")
    code, err = _commlens("trace", "--force", "--out", run, "--", sys.executable, "-c", "1")
    _one_line_error(code, err, "node-00000.json")
    assert not [p.name for p in run.iterdir() if p.name.startswith(".join.lock")]
    profile = tmp_path / "net.toml"
    os.mkfifo(profile)
    code, err = _commlens("whatif", _tiny(tmp_path, "other"), "--net", profile)
    _one_line_error(code, err, "net.toml", "named pipe")
    code, err = _commlens("predict", "--model", "gpt-tiny", "--scheme", "dp", "--net", profile)
    _one_line_error(code, err, "net.toml", "named pipe")


# -- item 3: merge copies only regular files of a parts directory -------------------------


@pytest.mark.parametrize("target", ["dev-zero", "folder", "file"])
def test_merge_never_follows_a_link_in_a_parts_directory(tmp_path: Path, target: str) -> None:
    run = _tiny(tmp_path)
    parts = run / ".rank-00001.parts"
    parts.mkdir()
    (parts / "sites.jsonl").write_text("")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("not the run's")
    link = {"dev-zero": "/dev/zero", "folder": secret, "file": secret / "key.txt"}[target]
    (parts / "part-000000.bin").symlink_to(link)
    code, err = _commlens("merge", tmp_path / "joined", run)
    _one_line_error(code, err, "part-000000.bin", "symlink")
    assert not (tmp_path / "joined").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".joined")]


# -- item 4: a joining node never writes through a planted link ---------------------------


def _job(slot: int) -> JobIdentity:
    return JobIdentity("torchrun static 127.0.0.1:1 nnodes=2", "torchrun-static", 2, slot)


def test_a_node_joining_refuses_a_planted_parts_link(tmp_path: Path) -> None:
    out, victim = tmp_path / "shared", tmp_path / "victim"
    victim.mkdir()
    (victim / "sites.jsonl").write_text("precious\n")
    (victim / "part-000000.tmp").write_text("precious")
    assert join_run_dir(out, _job(0), False, {"host": "a"}) == 0
    (out / ".rank-00001.parts").symlink_to(victim)
    before = _snapshot(victim)
    with pytest.raises(UsageError, match=r"\.rank-00001\.parts.*did not write"):
        join_run_dir(out, _job(1), False, {"host": "b"})
    # the rank's writer itself refuses the link too (planted after the join)
    with pytest.raises(OSError, match="symlink"):
        EventWriter(out, 1)
    assert _snapshot(victim) == before


def test_the_manifest_lock_is_never_opened_through_a_link(tmp_path: Path) -> None:
    run = _tiny(tmp_path)
    (run / MANIFEST_LOCK).unlink(missing_ok=True)
    elsewhere = tmp_path / "created-by-commlens"
    (run / MANIFEST_LOCK).symlink_to(elsewhere)
    with pytest.raises(CommlensError, match="symlink"):
        merge_manifest(run)
    assert not elsewhere.exists() and not elsewhere.is_symlink()


# -- item 5: an output never lands in the run it is made from -----------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{run}", "--format", "csv", "-o", "{run}/rank-00000.parquet"],
        ["export", "{run}", "-o", "{run}/rank-00001.parquet"],
        ["whatif", "{run}", "--net", "tcp-10g", "-o", "{run}/run.json"],
        ["query", "{run}", "SELECT 1", "-o", "{run}/rank-00001.json"],
        ["report", "{run}", "-o", "{link}"],
        ["compare", "{run}", "{other}", "-o", "{other}/new.txt"],
    ],
)
def test_an_output_inside_the_input_run_is_refused(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    run, other = _tiny(tmp_path), _tiny(tmp_path, "other")
    link = tmp_path / "report.txt"
    link.symlink_to(run / "rank-00002.json")  # an outside name for a file inside
    before = _snapshot(tmp_path)
    filled = [a.format(run=run, other=other, link=link) for a in args]
    assert main(filled) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "which this command reads" in err[0], err
    assert _snapshot(tmp_path) == before
    assert main(["report", str(run)]) == 0  # still readable
