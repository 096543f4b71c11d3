"""Hostile values in what commlens reads: one clear line (or a warning and the rest of
the run), never a traceback, a hang or unbounded work; and what a killed command or a
lock left behind is cleaned up by the next one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.tempdirs import reclaim
from commlens.trace.jobid import JobIdentity, job_identity
from commlens.trace.layout import JOIN_LOCK
from commlens.trace.merge import merge_runs
from commlens.trace.rundir import LOCK_STALE_S, join_run_dir

DATA = Path(__file__).parent.parent / "data"
RUN_ARGS = ["run", "--model", "gpt-tiny", "--scheme", "dp", "--nproc", "2", "--steps", "2"]


def _tiny(tmp_path: Path, name: str = "run", keep: tuple[int, ...] = (0, 1, 2, 3)) -> Path:
    run = Path(shutil.copytree(DATA / "tiny_run", tmp_path / name))
    for rank in {0, 1, 2, 3} - set(keep):
        (run / f"rank-{rank:05d}.json").unlink()
        (run / f"rank-{rank:05d}.parquet").unlink()
    return run


def _one_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0], err
    assert all(n in err[0] for n in needles), err[0]
    return err[0]


# -- item 13: merge joins one job only -------------------------------------------------


def _shift(run: Path, seconds: float) -> None:
    """Each rank ran 10 s from ``seconds`` after the tiny run's clock reference."""
    for meta in run.glob("rank-*.json"):
        data = json.loads(meta.read_text())
        data["t_start_ns"] = data["clock"]["t_ref_ns"] + int(seconds * 1e9)
        data["t_end_ns"] = data["t_start_ns"] + 10_000_000_000
        meta.write_text(json.dumps(data))


def test_merge_refuses_runs_of_two_jobs_without_job_files(tmp_path: Path) -> None:
    first, later = _tiny(tmp_path, "a", (0, 1)), _tiny(tmp_path, "b", (2, 3))
    _shift(first, 0)
    _shift(later, 3600)  # the same world size, an hour later: another job
    with pytest.raises(UsageError, match=r"different jobs.*after every rank"):
        merge_runs(tmp_path / "joined", [first, later])
    (first / "job.json").write_text(json.dumps({"id": "torchrun static h:1 nnodes=2"}))
    _shift(later, 1)  # one job again, by its time
    with pytest.raises(UsageError, match=r"no job\.json while another run is of job"):
        merge_runs(tmp_path / "joined", [first, later])
    (later / "job.json").write_text(json.dumps({"id": ["not", "a", "string"]}))
    with pytest.raises(UsageError, match=r"job\.json is unreadable or names no job id"):
        merge_runs(tmp_path / "joined", [first, later])
    assert not (tmp_path / "joined").exists()


def test_merge_never_counts_a_rank_it_did_not_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _tiny(tmp_path, "a", (0,)), _tiny(tmp_path, "b", (1,))
    for run in (first, second):  # a world of 2, one rank in each
        for meta in run.glob("rank-*.json"):
            meta.write_text(json.dumps({**json.loads(meta.read_text()), "world_size": 2}))
    elsewhere = tmp_path / "rank-00001.parquet"
    shutil.move(second / "rank-00001.parquet", elsewhere)
    (second / "rank-00001.parquet").symlink_to(elsewhere)
    assert main(["merge", str(tmp_path / "joined"), str(first), str(second)]) == 2
    _one_line(capsys, "rank-00001.parquet is a symlink")
    assert not (tmp_path / "joined").exists()


# -- item 15: tracebacks on hostile values ---------------------------------------------


def test_a_node_file_whose_launcher_is_no_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _tiny(tmp_path)
    node = {"format": "commlens-run-node", "slot": 0, "status": "ended", "launcher": [1, 2]}
    (run / "node-00000.json").write_text(json.dumps(node))
    assert main(["report", str(run)]) == 0
    assert main(["merge", str(tmp_path / "joined"), str(run)]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ["²", "٣", "1e30", str(10**30), "-1", " 2"])
def test_counts_from_the_environment_are_ascii_numbers(value: str) -> None:
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}
    with pytest.raises(UsageError, match="SLURM_NTASKS"):
        job_identity(["python", "x.py"], {**slurm, "SLURM_NTASKS": value})
    with pytest.raises(UsageError, match="SLURM_PROCID"):
        job_identity(["python", "x.py"], {**slurm, "SLURM_NTASKS": "2", "SLURM_PROCID": value})
    with pytest.raises(UsageError, match="--nnodes"):
        job_identity(["torchrun", "--nnodes", value, "x.py"], {})
    with pytest.raises(UsageError, match="--node_rank"):
        job_identity(["torchrun", "--nnodes", "2", "--node_rank", value, "x.py"], {})


@pytest.mark.parametrize("damage", ["deep", "no-steps", "unpaired-steps"])
def test_compare_with_a_hostile_whatif_result(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run, pred = _tiny(tmp_path), tmp_path / "pred.json"
    assert main(["whatif", str(run), "--net", "tcp-10g", "--format", "json", "-o", str(pred)]) == 0
    data = json.loads(pred.read_text())
    if damage == "deep":
        pred.write_text("[" * 100_000 + "]" * 100_000)
    else:
        data["networks"][0]["steps"] = [] if damage == "no-steps" else [0, 1, 2]
        pred.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["compare", str(pred), str(run)]) == 2
    _one_line(capsys, "pred.json")


def test_a_deeply_nested_sweep_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "deep.toml"
    spec.write_text("[sweep]\nx = " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert main(["sweep", str(spec), "--list"]) == 2
    _one_line(capsys, "nested too deeply")


@pytest.mark.parametrize("column", ["bytes_in", "t_end_ns", "phase"])
def test_export_leaves_out_a_rank_with_a_damaged_page(
    tmp_path: Path, column: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _tiny(tmp_path)
    file = run / "rank-00001.parquet"
    meta = pq.ParquetFile(file).metadata.row_group(0)
    chunk = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column
    )
    data = bytearray(file.read_bytes())
    data[chunk.data_page_offset : chunk.data_page_offset + chunk.total_compressed_size] = bytes(
        chunk.total_compressed_size
    )
    file.write_bytes(bytes(data))
    out = tmp_path / "trace.json"
    assert main(["export", str(run), "-o", str(out)]) == 0
    assert "rank 1 skipped" in capsys.readouterr().err
    events = json.loads(out.read_text())["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {0, 2, 3}
    # a selection decodes its own ranks' pages only: the damaged rank is not read
    assert main(["export", str(run), "--ranks", "0,2", "-o", str(out)]) == 0
    assert "skipped" not in capsys.readouterr().err
    events = json.loads(out.read_text())["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {0, 2}


# -- item 16: bounds ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["whatif", "{run}", "--net", "tcp-10g", "--dp", "1000000000"], "--dp"),
        ([*RUN_ARGS[:-1], str(10**21), "--out", "{out}"], "--steps"),
        ([*RUN_ARGS, "--lr", "nan", "--out", "{out}"], "--lr"),
        ([*RUN_ARGS, "--lr", "inf", "--out", "{out}"], "--lr"),
    ],
)
def test_scales_out_of_bounds_are_one_line_at_once(
    tmp_path: Path, args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run, out = _tiny(tmp_path), tmp_path / "new-run"
    start = time.monotonic()
    assert main([a.format(run=run, out=out) for a in args]) == 2
    assert time.monotonic() - start < 20
    _one_line(capsys, needle)
    assert not out.exists()  # no rank started, nothing half-written


def test_a_sweep_of_too_many_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(f'[sweep]\nmodel = "gpt-tiny"\nscheme = "dp"\nsteps = {2**63 - 1}\n')
    assert main(["sweep", str(spec), "--list"]) == 2
    _one_line(capsys, "--steps")


def test_a_stale_join_lock_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    (out / JOIN_LOCK).mkdir()
    old = time.time() - LOCK_STALE_S - 5
    os.utime(out / JOIN_LOCK, (old, old))
    grave = out / f"{JOIN_LOCK}.stale.otherhost.4242"  # left by a process killed meanwhile
    grave.mkdir()
    job = JobIdentity("torchrun static 127.0.0.1:1 nnodes=2", "torchrun-static", 2, 0)
    assert join_run_dir(out, job, False, {"host": "a"}) == 0
    assert not [p.name for p in out.iterdir() if p.name.startswith(JOIN_LOCK)]


_KILLED = """
import os, signal
from commlens.tempdirs import make_temp_dir
path = make_temp_dir({kind!r})
(path / "half.db").write_text("x")
print(path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("kind", ["run", "query"])
def test_a_killed_commands_temp_folder_is_reclaimed(tmp_path: Path, kind: str) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _KILLED.format(kind=kind)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL
    left = Path(done.stdout.strip())
    assert left.parent == tmp_path and left.is_dir()
    mine = tmp_path / f"commlens-{kind}-{os.getpid()}-alive"
    mine.mkdir()  # a running process's folder is kept
    assert reclaim(kind, str(tmp_path)) == [left]
    assert not left.exists() and mine.is_dir()


def test_csv_cells_are_never_formulas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _tiny(tmp_path)
    sql = "SELECT '=HYPERLINK(1)' AS a, '+1' AS b, '-1' AS c, '@SUM(1)' AS d, 'ok' AS e, -2 AS f"
    assert main(["query", str(run), sql, "--format", "csv"]) == 0
    _, row = capsys.readouterr().out.strip().splitlines()
    assert row == '"\'=HYPERLINK(1)","\'+1","\'-1","\'@SUM(1)","ok",-2'
    out = tmp_path / "r.csv"
    assert main(["report", str(run), "--format", "csv", "-o", str(out)]) == 0
    cells = [c.strip('"') for line in out.read_text().splitlines() for c in line.split(",")]
    assert not [c for c in cells if c[:1] in ("=", "+", "@")]


def test_a_node_that_fails_to_start_frees_its_slot_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever breaks between claiming a slot and starting (here: an unexpected error
    merging the manifest), the node file says ended, so the slot is not held for 60 s."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unexpected")

    monkeypatch.setattr("commlens.trace.manifest.merge_manifest", broken)
    out = tmp_path / "shared"
    torchrun = str(Path(sys.executable).parent / "torchrun")
    cmd = [torchrun, "--nnodes", "2", "--node_rank", "0", "--master_port", "1", "x.py"]
    with pytest.raises(RuntimeError, match="unexpected"):
        main(["trace", "--out", str(out), "--", *cmd])
    node = json.loads((out / "node-00000.json").read_text())
    assert node["status"] == "ended" and node["result"] == "not started"
