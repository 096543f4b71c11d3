"""commlens trace --out DIR -- COMMAND ...: trace a job with no code change.

COMMAND is a launcher (torchrun, python -m torch.distributed.run, a
script that spawns its own ranks), or any rank program when --nproc N
asks commlens to start the ranks itself. Every Python process of the job
starts a capture as soon as it imports torch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import sysconfig
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlens.cli.doctor import add_hang_options, check_hang_options, watching
from commlens.errors import CommandError, CommlensError, UsageError
from commlens.launch import LaunchResult, launch_ranks, run_job
from commlens.launch.signals import signal_name

if TYPE_CHECKING:
    from commlens.trace.jobid import JobIdentity
    from commlens.trace.live import LiveLock

_SLURM_NODE_ENV = ("SLURMD_NODENAME", "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID")

SITE_DIR = Path(__file__).resolve().parent.parent / "capture" / "_site"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace",
        help="trace every communication op of a job (no code change)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=Path, help="run directory to write")
    p.add_argument(
        "--nproc",
        type=int,
        help="start this many ranks of COMMAND here, in total over --nodes (no launcher needed)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="with --nproc: emulated nodes (network namespaces, needs root); ranks spread evenly",
    )
    p.add_argument(
        "--link", help="with --nproc: shape each node's uplink to RATE (e.g. 500mbit, 2gbit)"
    )
    p.add_argument("--force", action="store_true", help="replace an existing run in --out")
    add_hang_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    p.set_defaults(func=run)


def prepare_out(out: Path, force: bool) -> LiveLock:
    """Make ``out`` an empty run directory, refusing to mix two runs; its live lock.

    ``--force`` replaces only a commlens run, and only commlens's files in it,
    and never a run that a process still writes.
    """
    from commlens.trace.rundir import prepare_run_dir

    return prepare_run_dir(out, force)


def tracing_env(out: Path) -> dict[str, str]:
    """The job's environment: the capture's switch and hook, and commlens's own ``bin/`` on PATH.

    The job must run a Python that can import commlens. Called as
    ``.venv/bin/commlens`` without an activated environment, the launcher
    beside it (``torchrun``, ``python``) is the one meant, so its folder goes
    first on PATH unless PATH already holds it.
    """
    env = dict(os.environ)
    env["COMMLENS_TRACE_DIR"] = str(out.resolve())
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *filter(None, [env.get("PYTHONPATH", "")])])
    scripts = sysconfig.get_path("scripts")
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    if scripts and not any(_same_dir(p, scripts) for p in path):
        env["PATH"] = os.pathsep.join([scripts, *path])
    return env


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command to trace; usage: commlens trace --out DIR -- COMMAND ...")
    check_hang_options(args)
    if args.nproc is not None and args.nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {args.nproc}")
    emulated = args.nodes != 1 or args.link is not None
    if emulated and args.nproc is None:
        raise UsageError("--nodes/--link need --nproc (commlens must start the ranks itself)")
    if args.nodes < 1 or (args.nproc and args.nproc % args.nodes):
        raise UsageError(f"--nproc {args.nproc} must be a multiple of --nodes {args.nodes}")
    if args.link is not None:
        from commlens.netem import parse_rate

        parse_rate(args.link)  # a bad rate fails here, before anything starts
    if emulated:
        from commlens.netem import iproute

        iproute.require_netns("an emulated link (--link/--nodes)")
    out: Path = args.out
    env = tracing_env(out)
    if shutil.which(cmd[0], path=env["PATH"]) is None and not Path(cmd[0]).exists():
        raise UsageError(f"command not found: {cmd[0]}")
    from commlens.trace.jobid import job_identity

    job = job_identity(cmd, os.environ)
    if job is not None:
        if args.nproc is not None:
            raise UsageError(
                f"--nproc starts the ranks of a single node, but this is {job.id} "
                "(let torchrun or the program take the rank)"
            )
        with watching(out, args, "commlens trace") as dog:
            return _run_node(out, cmd, job, args.force, env, dog)
    with prepare_out(out, args.force):  # held until the run is complete
        return _run_here(args, cmd, out, env, emulated)


def _run_here(
    args: argparse.Namespace, cmd: list[str], out: Path, env: dict[str, str], emulated: bool
) -> int:
    """The single-node trace of ``cmd`` into the prepared ``out``; the job's exit code."""
    from commlens.trace.manifest import merge_manifest

    try:
        merge_manifest(out, {"command": cmd, "launcher": {"nproc": args.nproc}})
    except OSError as exc:
        _remove_temp_manifests(out)
        raise CommandError(f"cannot write the manifest in {out}: {exc}") from None
    t0 = time.time()
    topology: dict[str, Any] = {"nodes": 1, "link": None, "intra_node": "loopback"}
    launcher: dict[str, Any]
    with watching(out, args, "commlens trace") as dog:
        if args.nproc and emulated:
            from commlens.netem import launch_emulated

            emu = launch_emulated(cmd, args.nproc, args.nodes, args.link, env=env, run_dir=out)
            code, topology = emu.exit_code, emu.topology
            launcher, status = _ranks_fields(emu), _ranks_status(emu)
        else:
            code, launcher, status = _launch(cmd, args.nproc, env)
    launcher["wall_s"] = time.time() - t0
    from commlens.launch.watchdog import kill_status

    status = kill_status(dog) or status
    extra = {"launcher": launcher, "topology": topology, "link": topology.get("link")}
    return _finish(out, code, status, extra)


def _launch(
    cmd: list[str], nproc: int | None, env: dict[str, str]
) -> tuple[int, dict[str, Any], str]:
    """Run the job here: its exit code, the manifest's launcher fields and a status."""
    if nproc:
        result = launch_ranks(cmd, nproc, env=env)
        return result.exit_code, _ranks_fields(result), _ranks_status(result)
    job = run_job(cmd, env=env)
    code, launcher = job.exit_code, {**job.launcher_fields(), "exit_codes": []}
    status = "ok" if code == 0 else f"exit code {code}"
    if job.stop_signal:
        status += f", stopped by {signal_name(job.stop_signal)}"
    return code, launcher, status


def _run_node(
    out: Path, cmd: list[str], job: JobIdentity, force: bool, env: dict[str, str], dog: Any
) -> int:
    """One node of a multi-node job: join the shared run, run, record this node's end.

    This node's facts go only into its own node file; ``run.json`` is re-merged
    from all of them (:mod:`commlens.trace.nodes`).
    """
    from commlens.trace.live import LiveLock

    node: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": cmd,
        "job": job.id,
        "started_unix_s": time.time(),
        "slurm": {k.lower(): v for k, v in os.environ.items() if k in _SLURM_NODE_ENV},
    }
    with LiveLock(out) as live:  # held until this node's part is complete
        return _node_run(out, cmd, job, force, env, node, live, dog)


def _node_run(
    out: Path,
    cmd: list[str],
    job: JobIdentity,
    force: bool,
    env: dict[str, str],
    node: dict[str, Any],
    live: LiveLock,
    dog: Any,
) -> int:
    """:func:`_run_node` holding ``live``."""
    from commlens.trace.layout import node_path
    from commlens.trace.manifest import merge_manifest
    from commlens.trace.nodes import heartbeat, write_node
    from commlens.trace.rundir import join_run_dir

    slot = join_run_dir(out, job, force, node, live)
    path = node_path(out, slot)
    node.update(slot=slot, node=job.node if job.node is not None else str(slot))
    env["COMMLENS_NODE"] = node["node"]
    try:
        write_node(path, {**node, "status": "running"})
        merge_manifest(out)
    except BaseException as exc:  # whatever failed, the slot is not left looking running
        _remove_temp_manifests(out)
        try:
            write_node(path, {**node, "status": "ended", "result": "not started"})
        except (OSError, CommlensError):
            pass
        if isinstance(exc, (OSError, CommlensError)):
            raise CommandError(f"cannot write the manifest in {out}: {exc}") from None
        raise
    print(f"commlens trace: {job.id}: node slot {slot} of {job.slots} -> {out}", file=sys.stderr)
    t0 = time.time()
    with heartbeat(path):
        code, launcher, status = _launch(cmd, None, env)
    launcher["wall_s"] = time.time() - t0
    from commlens.launch.watchdog import kill_status

    status = kill_status(dog) or status
    end = {"status": "ended", "exit_code": code, "result": status, "launcher": launcher}
    try:
        write_node(path, {**node, **end, "ended_unix_s": time.time()})
    except OSError as exc:
        print(f"commlens trace: warning: cannot write {path}: {exc}", file=sys.stderr)
    return _finish(out, code, status, {})


def _ranks_status(result: LaunchResult) -> str:
    return "ok" if result.ok else f"exit code {result.exit_code}: {result.failure()}"


def _ranks_fields(result: LaunchResult) -> dict[str, Any]:
    """The manifest's launcher fields for ranks commlens started itself."""
    failed = result.first_failed
    return {
        "exit_code": result.exit_code,
        "exit_codes": result.exit_codes,
        "first_failed": failed,
        "signal": signal_name(-result.exit_codes[failed])
        if failed is not None and result.exit_codes[failed] < 0
        else None,
        "stopped_by": signal_name(result.stop_signal) if result.stop_signal else None,
    }


def _finish(out: Path, code: int, status: str, extra: dict[str, Any]) -> int:
    """Merge the launcher's facts into the manifest and report; the job's code either way."""
    from commlens.trace.manifest import merge_manifest

    try:
        manifest = merge_manifest(out, extra)
    except (OSError, CommlensError) as exc:
        _remove_temp_manifests(out)
        print(
            f"commlens trace: warning: the job ended ({status}) but its manifest "
            f"could not be written in {out}: {exc}",
            file=sys.stderr,
        )
        return code
    ranks = manifest.get("ranks", {})
    events = sum(int(meta.get("events", 0)) for meta in ranks.values())
    print(
        f"commlens trace: {len(ranks)} ranks, {events} events -> {out} ({status})", file=sys.stderr
    )
    return code


def _remove_temp_manifests(out: Path) -> None:
    """This process's half-written manifest copies, left by a failed write."""
    pid = os.getpid()
    try:
        leftovers = [*out.glob(f".run.json.{pid}.tmp"), *out.glob(f".run.json.{pid}.*.tmp")]
    except OSError:
        return
    for path in leftovers:
        try:
            path.unlink()
        except OSError:
            pass
