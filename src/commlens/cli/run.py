"""``commlens run``: train a built-in model under a parallel scheme, captured."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlens.cli.doctor import add_hang_options, check_hang_options, watching
from commlens.cli.report import add_width_option
from commlens.errors import CommandError, UsageError
from commlens.job.memory import check_local_ranks
from commlens.job.options import RUN, add_job_options, add_node_options, resolve_nproc
from commlens.job.spec import Job
from commlens.launch import LaunchResult, launch_ranks
from commlens.launch.procs import python_argv
from commlens.tempdirs import temp_dir
from commlens.units import plural
from commlens.workloads.config import workload_from_options
from commlens.workloads.fit import check_fits

if TYPE_CHECKING:
    from commlens.trace.live import LiveLock

WORKER = "commlens.workloads.worker"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="train a built-in GPT/BERT/T5 under DP, ZeRO, TP, PP or 3D and capture it",
        description=(
            "Launch --nproc ranks in total (or --nproc-per-node × --nodes, as torchrun counts "
            "them) on this host that train a built-in model with synthetic "
            "tokens under a parallel scheme, capture every communication op into --out, "
            "and print a summary: step time, communication share, top ops by time."
        ),
    )
    add_job_options(p, RUN)
    add_node_options(p)
    p.add_argument(
        "--link",
        metavar="RATE",
        help="shape each emulated node's uplink to RATE (e.g. 500mbit, 10gbit)",
    )
    p.add_argument("--out", type=Path, help="run directory (default runs/MODEL-SCHEME-TIME)")
    p.add_argument("--force", action="store_true", help="replace an existing run in --out")
    add_hang_options(p)
    add_width_option(p)
    p.set_defaults(func=run_command)


def _prepare_out(out: Path | None, job: Job, force: bool) -> tuple[Path, LiveLock]:
    """The run directory, empty, and its live lock, held while the run is written;
    ``--force`` replaces only a commlens run's own files, and never a live run."""
    from commlens.trace.rundir import prepare_run_dir

    if out is None:
        out = Path("runs") / f"{job.model.name}-{job.scheme}-{time.strftime('%Y%m%d-%H%M%S')}"
    return out, prepare_run_dir(out, force)


def _rank_env(job: Job) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if job.run.backend == "gloo":  # share the cores instead of oversubscribing them
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // job.dims.world_size)))
    return env


def _check_emulation(args: argparse.Namespace) -> bool:
    """Whether ranks go on emulated nodes; a UsageError for a layout that cannot."""
    if args.nodes < 1 or args.nproc % args.nodes:
        raise UsageError(f"--nproc {args.nproc} must be a multiple of --nodes {args.nodes}")
    emulated = args.nodes != 1 or args.link is not None
    if args.link is not None:
        from commlens.netem import parse_rate

        parse_rate(args.link)
    if emulated:
        from commlens.netem import iproute

        iproute.require_netns("an emulated link (--link/--nodes)")
    return bool(emulated)


def _launch(
    argv: list[str], job: Job, args: argparse.Namespace, out: Path, emulated: bool
) -> tuple[LaunchResult, dict[str, Any]]:
    """Start the ranks, here or on emulated nodes; the result and the topology."""
    env = _rank_env(job)
    if emulated:
        from commlens.netem import launch_emulated

        emu = launch_emulated(
            argv, job.dims.world_size, args.nodes, args.link, env=env, run_dir=out
        )
        return emu, emu.topology
    topology = {"nodes": 1, "link": None, "intra_node": "loopback"}
    return launch_ranks(argv, job.dims.world_size, env=env), topology


def run_command(args: argparse.Namespace) -> int:
    check_hang_options(args)
    resolve_nproc(args)
    check_local_ranks(args.nproc)
    job = workload_from_options(args)
    emulated = _check_emulation(args)
    check_fits(job)
    out, live = _prepare_out(args.out, job, args.force)
    with live:
        return _run(args, job, out, emulated)


def _run(args: argparse.Namespace, job: Job, out: Path, emulated: bool) -> int:
    """Run the prepared job into ``out`` and print its summary; the exit code."""
    d = job.dims
    print(
        f"commlens run: {job.model.name} · {job.scheme} · dp={d.dp} tp={d.tp} pp={d.pp} · "
        f"{plural(d.world_size, 'rank')} ({job.run.backend})"
        + (f" on {plural(args.nodes, 'node')}, link {args.link or 'unshaped'}" if emulated else "")
        + f" → {out}",
        flush=True,
    )
    print(f"starting {plural(d.world_size, 'rank')}...", flush=True)
    with temp_dir("run") as tmp:  # a killed run's is reclaimed at the next start
        config = Path(tmp) / "workload.json"
        config.write_text(json.dumps(job.to_dict()))
        argv = python_argv(WORKER, str(config), str(out))
        with watching(out, args, "commlens run") as dog:
            result, topology = _launch(argv, job, args, out, emulated)
    if result.interrupted:  # the ranks are stopped; one line, as for any Ctrl-C
        print(f"commlens run: {result.failure()}", file=sys.stderr)
        return result.exit_code
    if not result.ok:
        from commlens.launch.watchdog import kill_status

        why = kill_status(dog) or f"training failed: {result.failure()}"
        raise CommandError(f"{why}; partial run left in {out}", result.exit_code)
    from commlens.report.output import emit
    from commlens.report.run_summary import run_summary_document
    from commlens.workloads.summary import finalize_run, summarize

    manifest = finalize_run(out, job, ["commlens", *sys.argv[1:]], topology)
    emit(run_summary_document(summarize(out, manifest, job), out), None, "text", width=args.width)
    return 0
