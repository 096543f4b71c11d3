"""A job of several nodes writes one run: two torchrun "nodes" on one host (gloo).

Each node runs its own ``commlens trace`` with the same ``--out`` (static and
c10d rendezvous, either start order, a delay between them); per-node
directories joined by ``commlens merge``; a Slurm-style start from SLURM_*
alone; a second job pointed at a live run is refused without harming it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import commlens
from commlens.cli.trace import SITE_DIR
from commlens.errors import UsageError
from commlens.launch import free_port
from commlens.trace.jobid import JobIdentity, job_identity
from commlens.trace.layout import JOIN_LOCK, node_path
from commlens.trace.merge import merge_runs
from commlens.trace.nodes import write_node
from commlens.trace.rundir import join_run_dir

PROG = str(Path(__file__).parent.parent / "capture" / "tracedprog.py")
SLURM_PROG = str(Path(__file__).with_name("slurmprog.py"))
BIN = Path(sys.executable).parent
DATA = Path(__file__).parent.parent / "data"
COMMLENS = shutil.which("commlens", path=str(BIN)) or "commlens"
DELAY_S = 2.0
TIMEOUT_S = 240


def _torchrun(port: int, node: int | None, rdzv: str) -> list[str]:
    cmd = [str(BIN / "torchrun"), "--nnodes", "2", "--nproc_per_node", "1"]
    if rdzv == "static":
        cmd += ["--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", str(port)]
    else:
        cmd += ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}"]
        cmd += ["--rdzv_id", "job-a"]
    return [*cmd, PROG]


def _trace(out: Path, cmd: list[str], *flags: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [COMMLENS, "trace", "--out", str(out), *flags, "--", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def _done(proc: subprocess.Popen[str]) -> str:
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # the launcher at least: a hang fails the test, never the session
        _, err = proc.communicate()
        raise AssertionError(f"no end in {TIMEOUT_S} s:\n{err[-3000:]}") from None
    assert proc.returncode == 0, err[-3000:]
    return err


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _check_one_run(out: Path, commands: dict[str, list[str]]) -> None:
    run = commlens.load_run(out)
    assert run.ranks == [0, 1] and not run.warnings and run.world_size == 2
    manifest = run.manifest
    assert {k: v["command"] for k, v in manifest["nodes"].items()} == commands
    assert all(n["exit_code"] == 0 and n["status"] == "ended" for n in manifest["nodes"].values())
    assert manifest["launcher"]["exit_code"] == 0
    topo = manifest["topology"]
    assert topo["nodes"] == 2 and topo["ranks_per_node"] == 1
    assert sorted(topo["node_ranks"].values()) == [[0], [1]]
    for rank in ("0", "1"):  # the ranks' own facts, and clocks aligned across the nodes
        launch = manifest["ranks"][rank]["meta"]["launch"]
        assert launch["local_rank"] == 0 and launch["local_world_size"] == 1
        assert "offset_ns" in manifest["ranks"][rank]["clock"]
    assert manifest["ranks"]["1"]["clock"]["rtt_ns"] > 0
    counts = run.duckdb().execute("select count(*) from events where op = 'all_reduce'").fetchone()
    assert counts == (6,)


@pytest.mark.parametrize("rdzv", ["static", "c10d"])
@pytest.mark.parametrize("first", [0, 1])
def test_two_nodes_one_out(tmp_path: Path, rdzv: str, first: int) -> None:
    out, port = tmp_path / "run", free_port()
    cmds = {str(k): _torchrun(port, k, rdzv) for k in (0, 1)}
    procs = [_trace(out, cmds[str(first)])]
    time.sleep(DELAY_S)  # the required delay between the nodes' starts, not a synchronisation
    procs.append(_trace(out, cmds[str(1 - first)]))
    errs = [_done(p) for p in procs]
    assert all("2 ranks" in e for e in errs)
    if rdzv == "static":
        _check_one_run(out, cmds)
        report = subprocess.run(
            [COMMLENS, "report", str(out)], capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert report.returncode == 0, report.stderr
        assert "missing" not in report.stderr and "warning" not in report.stderr
    else:  # c10d: which command got which slot is the order of arrival
        nodes = commlens.load_run(out).manifest["nodes"]
        joined = {k: n["command"] for k, n in nodes.items()}
        assert sorted(joined) == ["0", "1"] and joined["0"] == cmds[str(first)]
        _check_one_run(out, joined)


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_per_node_dirs_joined_by_merge(tmp_path: Path) -> None:
    port = free_port()
    dirs = [tmp_path / f"node{k}" for k in (0, 1)]
    cmds = {str(k): _torchrun(port, k, "static") for k in (0, 1)}
    for err in [_done(p) for p in [_trace(d, cmds[str(k)]) for k, d in enumerate(dirs)]]:
        assert "1 ranks" in err
    alone = commlens.load_run(dirs[1], quiet=True)
    assert alone.ranks == [1] and alone.missing_ranks == [0]
    before = [_snapshot(d) for d in dirs]
    out = tmp_path / "joined"
    done = subprocess.run(
        [COMMLENS, "merge", str(out), *map(str, dirs)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "2 of 2 ranks" in done.stderr and "warning" not in done.stderr
    assert [_snapshot(d) for d in dirs] == before  # the inputs are only read
    _check_one_run(out, cmds)
    assert not list(tmp_path.glob(".joined*"))
    for args, message in [
        ([str(tmp_path / "again"), str(dirs[0]), str(dirs[0])], "given twice"),
        ([str(tmp_path / "again"), str(dirs[0]), str(out)], "rank 0 is in both"),
        ([str(out), *map(str, dirs)], "not empty"),
    ]:
        bad = subprocess.run([COMMLENS, "merge", *args], capture_output=True, text=True, timeout=60)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and message in lines[0], bad.stderr
    assert not (tmp_path / "again").exists()


def test_merge_of_runs_without_node_files(tmp_path: Path) -> None:
    """Environment-only or old runs: each input is one node, from its run.json."""
    dirs = []
    for k, keep in enumerate([(0, 1), (2, 3)]):
        d = Path(shutil.copytree(DATA / "tiny_run", tmp_path / f"part{k}"))
        for rank in {0, 1, 2, 3} - set(keep):
            (d / f"rank-{rank:05d}.json").unlink()
            (d / f"rank-{rank:05d}.parquet").unlink()
        dirs.append(d)
    result = merge_runs(tmp_path / "joined", dirs)
    assert (result.world_size, result.ranks, result.nodes, result.warnings) == (
        4,
        [0, 1, 2, 3],
        2,
        [],
    )
    run = commlens.load_run(tmp_path / "joined")
    assert run.ranks == [0, 1, 2, 3] and not run.warnings
    assert [n["source"] for n in run.manifest["nodes"].values()] == [str(d) for d in dirs]
    assert run.manifest["merged_from"] == [str(d) for d in dirs]
    for k, d in enumerate(dirs):  # each node of a c10d job traced alone took slot 0
        write_node(node_path(d, 0), {"slot": 0, "host": f"h{k}", "status": "ended"})
    nodes = commlens.load_run(merge_runs(tmp_path / "c10d", dirs).out).manifest["nodes"]
    assert {k: n["host"] for k, n in nodes.items()} == {"0": "h0", "1": "h1"}
    (dirs[1] / "rank-00003.json").unlink()
    (dirs[1] / "rank-00003.parquet").unlink()
    assert merge_runs(tmp_path / "partial", dirs).warnings == [
        "ranks [3] are in none of the runs; the joined run lacks them"
    ]


@pytest.mark.parametrize("tasks", ["one-per-rank", "one-per-node"])
def test_slurm_start(tmp_path: Path, tasks: str) -> None:
    """srun's tasks, emulated: SLURM_* set by the test; per node, torchrun starts the rank."""
    out, port = tmp_path / "run", free_port()
    slurm = dict(SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NTASKS="2", SLURM_NNODES="2")
    slurm.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SLURM_LOCALID="0")
    cmds = {
        str(task): [sys.executable, SLURM_PROG]
        if tasks == "one-per-rank"
        else _torchrun(port, task, "static")
        for task in (0, 1)
    }
    procs = []
    for task in (1, 0):
        env = dict(SLURM_PROCID=str(task), SLURM_NODEID=str(task), SLURMD_NODENAME=f"n{task}")
        procs.append(_trace(out, cmds[str(task)], **slurm, **env, LOCAL_WORLD_SIZE="1"))
    for proc in procs:
        assert "2 ranks" in _done(proc)
    manifest = commlens.load_run(out).manifest
    _check_one_run(out, cmds)
    assert manifest["job"]["id"] == "slurm 4242.0" and manifest["job"]["slots"] == 2
    assert manifest["nodes"]["1"]["slurm"]["slurmd_nodename"] == "n1"
    assert manifest["ranks"]["1"]["meta"]["launch"]["slurm_procid"] == 1


def test_another_job_is_refused_a_live_run(tmp_path: Path) -> None:
    out, port = tmp_path / "run", free_port()
    cmds = {str(k): _torchrun(port, k, "static") for k in (0, 1)}
    node0 = _trace(out, cmds["0"])
    _wait_for(node_path(out, 0), node0)  # node 0 joined; its ranks wait for node 1
    other = _torchrun(free_port(), 0, "static")
    single = [sys.executable, PROG, "spawn", str(free_port())]
    for cmd, message in [
        (other, "still being written"),
        (single, "still being written"),
        (cmds["0"], "slot 0 is taken"),
    ]:
        bad = subprocess.run(
            [COMMLENS, "trace", "--out", str(out), "--force", "--", *cmd],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and message in lines[0], bad.stderr
    node1 = _trace(out, cmds["1"], "--force")  # joins: a slot of this job is free
    _done(node0), _done(node1)
    _check_one_run(out, cmds)


def test_environment_only_two_nodes(tmp_path: Path) -> None:
    """The recipe for a launcher commlens does not wrap: the capture's environment alone."""
    out, port = tmp_path / "run", free_port()
    env = {**os.environ, "COMMLENS_TRACE_DIR": str(out), "PYTHONPATH": str(SITE_DIR)}
    procs = [
        subprocess.Popen(_torchrun(port, k, "static"), env=env, stderr=subprocess.PIPE, text=True)
        for k in (0, 1)
    ]
    for proc in procs:
        _done(proc)
    run = commlens.load_run(out)
    assert run.ranks == [0, 1] and not run.warnings and run.world_size == 2
    assert run.manifest["topology"]["nodes"] == 2  # from the ranks' own facts
    assert "offset_ns" in run.manifest["ranks"]["1"]["clock"]


def _job(slot: int | None = 0, ident: str = "torchrun static 127.0.0.1:1 nnodes=2") -> JobIdentity:
    return JobIdentity(ident, "torchrun-static", 2, slot)


def test_join_takes_over_a_stale_lock_and_replaces_only_an_ended_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / JOIN_LOCK).mkdir(parents=True)
    old = time.time() - 3600
    os.utime(out / JOIN_LOCK, (old, old))  # left by a process killed while holding it
    assert join_run_dir(out, _job(0), False, {"host": "a"}) == 0
    assert join_run_dir(out, _job(None), False, {"host": "b"}) == 1  # c10d: the free slot
    with pytest.raises(UsageError, match="this job"):
        join_run_dir(out, _job(1), True, {})
    with pytest.raises(UsageError, match="still being written"):
        join_run_dir(out, _job(0, "another job"), True, {})
    for slot in (0, 1):
        write_node(node_path(out, slot), {"slot": slot, "status": "ended", "exit_code": 0})
    with pytest.raises(UsageError, match="pass --force"):
        join_run_dir(out, _job(0), False, {})
    assert join_run_dir(out, _job(1), True, {"host": "c"}) == 1  # a new run of the same job
    assert not node_path(out, 0).exists() and not (out / JOIN_LOCK).exists()


def test_a_node_joins_a_run_another_node_is_creating(tmp_path: Path) -> None:
    """The first node holds the join lock while its job.json is still a temporary file:
    the second waits for the lock and joins (it once refused the folder as foreign, and
    the first node then waited for ever for its partner)."""
    out = tmp_path / "run"
    (out / JOIN_LOCK).mkdir(parents=True)  # node 0 deciding, its job.json not yet renamed
    tmp = out / ".job.json.4242.5f3a9c1e.tmp"
    tmp.write_text(json.dumps(_job(0).record()))

    def finish_creating() -> None:
        time.sleep(0.3)
        os.replace(tmp, out / "job.json")
        write_node(node_path(out, 0), {"slot": 0, "status": "running", "pid": os.getpid()})
        os.rmdir(out / JOIN_LOCK)

    creator = threading.Thread(target=finish_creating)
    creator.start()
    try:
        assert join_run_dir(out, _job(1), False, {"host": "b"}) == 1
    finally:
        creator.join()
    assert node_path(out, 0).exists() and node_path(out, 1).exists()


def test_a_foreign_folder_is_still_refused_before_anything_is_made_in_it(tmp_path: Path) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a commlens run"):
        join_run_dir(out, _job(0), False, {})
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_job_identity_from_launcher_and_slurm() -> None:
    torchrun = [str(BIN / "torchrun")]
    py = [sys.executable, "-m", "torch.distributed.run"]
    assert job_identity([*torchrun, "--nproc_per_node", "2", PROG], {}) is None
    assert job_identity([*torchrun, "--nnodes=1:1", PROG], {}) is None
    static = job_identity([*py, "--nnodes=2", "--node-rank=1", "--master-port", "7", PROG], {})
    assert static is not None and static.slot == 1 and static.slots == 2
    assert static.id == job_identity([*torchrun, "--nnodes", "2", "--master_port=7", PROG], {}).id  # type: ignore[union-attr]
    c10d = job_identity([*torchrun, "--nnodes", "1:4", PROG], {"PET_RDZV_BACKEND": "c10d"})
    assert c10d is not None and c10d.slot is None and c10d.slots == 4
    env = {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "3", "SLURM_NTASKS": "4", "SLURM_PROCID": "2"}
    slurm = job_identity([*torchrun, "--nnodes", "2", PROG], {**env, "SLURM_NODEID": "1"})
    assert slurm is not None and (slurm.id, slurm.slot, slurm.node) == ("slurm 9.3", 2, "1")
    assert job_identity(["python", PROG], {**env, "SLURM_NTASKS": "1"}) is None
    with pytest.raises(UsageError, match="node_rank"):
        job_identity([*torchrun, "--nnodes", "2", "--node_rank", "2", PROG], {})
