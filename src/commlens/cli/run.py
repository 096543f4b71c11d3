"""``commlens run``: train a built-in model under a parallel scheme, captured."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlens.errors import CommandError, UsageError
from commlens.job.memory import check_local_ranks
from commlens.job.models import PRESETS, SCHEMES
from commlens.launch import LaunchResult, launch_ranks
from commlens.launch.procs import python_argv
from commlens.workloads.config import (
    DTYPES,
    SCHEDULES,
    WorkloadConfig,
    workload_from_options,
)
from commlens.workloads.fit import check_fits

if TYPE_CHECKING:
    from commlens.workloads.summary import RunSummary

WORKER = "commlens.workloads.worker"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="train a built-in GPT/BERT/T5 under DP, ZeRO, TP, PP or 3D and capture it",
        description=(
            "Launch --nproc ranks on this host that train a built-in model with synthetic "
            "tokens under a parallel scheme, capture every communication op into --out, "
            "and print a summary: step time, communication share, top ops by time."
        ),
    )
    p.add_argument(
        "--model", required=True, metavar="PRESET", help=f"model preset: {', '.join(PRESETS)}"
    )
    p.add_argument(
        "--scheme",
        required=True,
        choices=SCHEMES,
        help="dp (DDP), zero1 (ZeroRedundancyOptimizer), zero2/zero3 (fully_shard), "
        "tp (Megatron tensor parallel), pp (pipeline), 3d (dp × tp × pp)",
    )
    p.add_argument("--nproc", type=int, default=2, help="ranks to start (default 2)")
    p.add_argument("--dp", type=int, help="data-parallel degree (default: what tp and pp leave)")
    p.add_argument("--tp", type=int, help="tensor-parallel degree (tp and 3d)")
    p.add_argument("--pp", type=int, help="pipeline stages (pp and 3d)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument(
        "--micro-batch",
        type=int,
        default=2,
        help="sequences per micro-batch per data-parallel rank (default 2)",
    )
    p.add_argument(
        "--microbatches",
        type=int,
        default=1,
        help="micro-batches per step: gradient accumulation / pipeline depth (default 1)",
    )
    p.add_argument(
        "--dtype",
        choices=tuple(DTYPES),
        default="fp32",
        help="training dtype for weights, gradients and activations (default fp32)",
    )
    p.add_argument("--recompute", action="store_true", help="recompute activations in backward")
    p.add_argument(
        "--schedule", choices=SCHEDULES, default="1f1b", help="pipeline schedule (default 1f1b)"
    )
    p.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="Megatron sequence parallelism in the tensor-parallel regions",
    )
    p.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=1,
        help="first steps left out of the summary (default 1)",
    )
    p.add_argument("--seed", type=int, default=1234, help="seed of data and weights")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="torch.distributed backend (auto: nccl when there is a GPU per rank)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="emulated nodes (network namespaces, needs root); ranks spread evenly",
    )
    p.add_argument(
        "--link",
        metavar="RATE",
        help="shape each emulated node's uplink to RATE (e.g. 500mbit, 10gbit)",
    )
    p.add_argument("--out", type=Path, help="run directory (default runs/MODEL-SCHEME-TIME)")
    p.add_argument("--force", action="store_true", help="replace an existing run in --out")
    p.set_defaults(func=run_command)


def build_config(args: argparse.Namespace) -> WorkloadConfig:
    """The workload the arguments describe; a UsageError for any bad combination."""
    return workload_from_options(args)


def _prepare_out(out: Path | None, wcfg: WorkloadConfig, force: bool) -> Path:
    """The run directory, empty; ``--force`` replaces only a commlens run's own files."""
    from commlens.trace.rundir import prepare_run_dir

    if out is None:
        out = Path("runs") / f"{wcfg.model.name}-{wcfg.scheme}-{time.strftime('%Y%m%d-%H%M%S')}"
    return prepare_run_dir(out, force)


def _rank_env(wcfg: WorkloadConfig) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if wcfg.backend == "gloo":  # share the cores instead of oversubscribing them
        env.setdefault(
            "OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // wcfg.dims.world_size))
        )
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
    argv: list[str], wcfg: WorkloadConfig, args: argparse.Namespace, out: Path, emulated: bool
) -> tuple[LaunchResult, dict[str, Any]]:
    """Start the ranks, here or on emulated nodes; the result and the topology."""
    env = _rank_env(wcfg)
    if emulated:
        from commlens.netem import launch_emulated

        emu = launch_emulated(
            argv, wcfg.dims.world_size, args.nodes, args.link, env=env, run_dir=out
        )
        return emu, emu.topology
    topology = {"nodes": 1, "link": None, "intra_node": "loopback"}
    return launch_ranks(argv, wcfg.dims.world_size, env=env), topology


def run_command(args: argparse.Namespace) -> int:
    check_local_ranks(args.nproc)
    wcfg = build_config(args)
    emulated = _check_emulation(args)
    check_fits(wcfg)
    out = _prepare_out(args.out, wcfg, args.force)
    d = wcfg.dims
    print(
        f"commlens run: {wcfg.model.name} · {wcfg.scheme} · dp={d.dp} tp={d.tp} pp={d.pp} · "
        f"{d.world_size} ranks ({wcfg.backend})"
        + (f" on {args.nodes} nodes, link {args.link or 'unshaped'}" if emulated else "")
        + f" → {out}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="commlens-run-") as tmp:
        config = Path(tmp) / "workload.json"
        config.write_text(json.dumps(wcfg.to_dict()))
        argv = python_argv(WORKER, str(config), str(out))
        result, topology = _launch(argv, wcfg, args, out, emulated)
    if result.interrupted:  # the ranks are stopped; one line, as for any Ctrl-C
        print(f"commlens run: {result.failure()}", file=sys.stderr)
        return result.exit_code
    if not result.ok:
        raise CommandError(
            f"training failed: {result.failure()}; partial run left in {out}", result.exit_code
        )
    from commlens.workloads.summary import finalize_run, summarize

    manifest = finalize_run(out, wcfg, ["commlens", *sys.argv[1:]], topology)
    print_summary(summarize(out, manifest, wcfg), wcfg, out)
    return 0


def _flops(tflops: float) -> str:
    return f"{tflops:.2f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:.2f} GFLOP/s"


def print_summary(s: RunSummary, wcfg: WorkloadConfig, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for line in s.warnings:
        console.print(f"[yellow]warning:[/] {line}")
    loss = (
        f"loss {s.first_loss:.4f} → {s.last_loss:.4f}"
        if s.first_loss is not None and s.last_loss is not None
        else ""
    )
    console.print(
        f"{s.steps} measured steps: step {s.step_s:.3f} s · communication {s.comm_s:.3f} s "
        f"({s.comm_share:.0%} of the step, {s.exposed_share:.0%} exposed) · "
        f"{s.tokens_per_s:,.0f} tokens/s · {_flops(s.tflops_per_rank)} per rank · {loss}"
    )
    table = Table(title="top ops by time (per rank per step)", title_justify="left")
    for col in ("op", "role", "group", "calls", "avg size (bytes)", "time (s)", "share of step"):
        table.add_column(col, justify="left" if col in ("op", "role") else "right")
    for row in s.top_ops.to_pylist():
        share = row["time_per_step_s"] / s.step_s if s.step_s > 0 else 0.0
        table.add_row(
            row["op"],
            row["role"] or "-",
            str(row["group_size"]),
            f"{row['calls_per_step']:.1f}",
            f"{row['avg_size_bytes']:,.0f}",
            f"{row['time_per_step_s']:.4f}",
            f"{share:.1%}",
        )
    console.print(table)
    console.print(f"run saved in {out}; see `commlens report {out}`")
