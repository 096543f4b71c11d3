"""``commlens trace --out DIR -- COMMAND ...``: trace a job with no code change.

COMMAND is a launcher (``torchrun``, ``python -m torch.distributed.run``, a
script that spawns its own ranks), or any rank program when ``--nproc N``
asks commlens to start the ranks itself. Every Python process of the job
starts a capture as soon as it imports torch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.launch import launch_ranks
from commlens.trace.manifest import merge_manifest
from commlens.trace.rundir import prepare_run_dir

SITE_DIR = Path(__file__).resolve().parent.parent / "capture" / "_site"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace",
        help="trace every communication op of a job (no code change)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=Path, help="run directory to write")
    p.add_argument("--nproc", type=int, help="start this many ranks of COMMAND here")
    p.add_argument(
        "--nodes", type=int, default=1, help="with --nproc: emulated nodes (network namespaces)"
    )
    p.add_argument(
        "--link", help="with --nproc: shape each node's uplink to RATE (e.g. 500mbit, 2gbit)"
    )
    p.add_argument("--force", action="store_true", help="replace an existing run in --out")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    p.set_defaults(func=run)


def prepare_out(out: Path, force: bool) -> None:
    """Make ``out`` an empty run directory, refusing to mix two runs.

    ``--force`` replaces only a commlens run, and only commlens's files in it.
    """
    prepare_run_dir(out, force)


def tracing_env(out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["COMMLENS_TRACE_DIR"] = str(out.resolve())
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *filter(None, [env.get("PYTHONPATH", "")])])
    return env


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command to trace; usage: commlens trace --out DIR -- COMMAND ...")
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
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        raise UsageError(f"command not found: {cmd[0]}")
    out: Path = args.out
    prepare_out(out, args.force)
    merge_manifest(out, {"command": cmd, "launcher": {"nproc": args.nproc}})
    env = tracing_env(out)
    t0 = time.time()
    topology: dict[str, Any] = {"nodes": 1, "link": None, "intra_node": "loopback"}
    if args.nproc and emulated:
        from commlens.netem import launch_emulated

        emu = launch_emulated(cmd, args.nproc, args.nodes, args.link, env=env, run_dir=out)
        code, codes, topology = emu.exit_code, emu.exit_codes, emu.topology
    elif args.nproc:
        result = launch_ranks(cmd, args.nproc, env=env)
        code, codes = result.exit_code, result.exit_codes
    else:
        try:
            code = subprocess.call(cmd, env=env)
        except KeyboardInterrupt:
            code = 130
        codes = []
    manifest = merge_manifest(
        out,
        {
            "launcher": {"exit_code": code, "exit_codes": codes, "wall_s": time.time() - t0},
            "topology": topology,
            "link": topology.get("link"),
        },
    )
    ranks = manifest.get("ranks", {})
    events = sum(int(meta.get("events", 0)) for meta in ranks.values())
    status = "ok" if code == 0 else f"exit code {code}"
    print(
        f"commlens trace: {len(ranks)} ranks, {events} events -> {out} ({status})", file=sys.stderr
    )
    return code
