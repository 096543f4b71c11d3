"""``commlens predict``: communication volume and time of a job, without running it."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from commlens.errors import UsageError
from commlens.job.models import SCHEMES, ModelConfig, get_preset
from commlens.job.parallel import ParallelDims
from commlens.job.spec import SCHEDULES, Job
from commlens.predict.cost import ALGORITHMS
from commlens.predict.forecast import DEFAULT_TFLOPS, Prediction, predict
from commlens.predict.limits import check_scales
from commlens.predict.profiles import get_profile, get_profiles

if TYPE_CHECKING:
    from rich.console import Console

SHAPE_FLAGS = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "max_positions")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predict per-step communication volume and time on network profiles",
        description="Analytical model of one training step: every collective per rank "
        "(exact for commlens's workloads, with conventions §2's textbook volume beside it) "
        "and its time on each network profile.",
    )
    p.add_argument(
        "--model", required=True, help="model preset, e.g. gpt-1.3b, bert-large, t5-base"
    )
    for flag in SHAPE_FLAGS:
        p.add_argument(
            f"--{flag.replace('_', '-')}",
            type=int,
            default=None,
            help=f"override the preset's {flag}",
        )
    p.add_argument(
        "--scheme",
        required=True,
        choices=SCHEMES,
        help="dp (DDP), zero1 (DDP + ZeroRedundancyOptimizer), zero2/zero3 (FSDP2), tp, pp, 3d",
    )
    p.add_argument("--dp", type=int, default=1, help="data-parallel degree (default 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    p.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="tokens per sequence (default: the model's positions, 2048 for GPT)",
    )
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch")
    p.add_argument("--microbatches", type=int, default=1, help="micro-batches per step")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"), help="training dtype")
    p.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism")
    p.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule")
    p.add_argument("--recompute", action="store_true", help="activation recomputation")
    p.add_argument(
        "--net",
        default="tcp-10g,ipoib-100g,rdma-100g",
        help="comma list of inter-node profiles (names or FILE.toml); speedups are over the first",
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=1,
        help="ranks per node (default 1: every rank on its own node)",
    )
    p.add_argument(
        "--nics-per-node",
        type=int,
        default=1,
        help="inter-node links per node, shared by the ranks that send across (default 1)",
    )
    p.add_argument("--intra", default="nvlink", help="profile of links inside a node")
    p.add_argument("--algo", default="ring", choices=ALGORITHMS, help="collective algorithm")
    p.add_argument(
        "--tflops",
        type=float,
        default=DEFAULT_TFLOPS,
        help=f"achieved model TFLOP/s per rank (default {DEFAULT_TFLOPS:g})",
    )
    p.add_argument("--format", default="text", choices=("text", "json"), help="output format")
    p.set_defaults(func=run)


def model_from_args(args: argparse.Namespace) -> ModelConfig:
    cfg = get_preset(args.model)
    overrides = {f: getattr(args, f) for f in SHAPE_FLAGS if getattr(args, f, None) is not None}
    if overrides:
        if "hidden" in overrides and "ffn_hidden" not in overrides and cfg.arch != "t5":
            overrides["ffn_hidden"] = 4 * overrides["hidden"]
        cfg = dataclasses.replace(cfg, name=f"{cfg.name}*", **overrides)
    return cfg


def check_args(args: argparse.Namespace) -> None:
    """Refuse a bad or oversized scale argument before anything is modelled."""
    for flag in ("dp", "tp", "pp"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be a positive integer, got {getattr(args, flag)}")
    scales: dict[str, float] = {
        "dp": args.dp,
        "tp": args.tp,
        "pp": args.pp,
        "world_size": args.dp * args.tp * args.pp,
        "micro_batch": args.micro_batch,
        "microbatches": args.microbatches,
        "gpus_per_node": args.gpus_per_node,
        "nics_per_node": args.nics_per_node,
        "tflops": args.tflops,
    }
    if args.seq_len is not None:
        scales["seq_len"] = args.seq_len
    for flag in SHAPE_FLAGS:
        if getattr(args, flag, None) is not None:
            scales[flag] = getattr(args, flag)
    check_scales(scales)


def job_from_args(args: argparse.Namespace) -> Job:
    check_args(args)
    dims = ParallelDims(args.dp * args.tp * args.pp, dp=args.dp, tp=args.tp, pp=args.pp)
    model = model_from_args(args)
    return Job(
        model=model,
        scheme=args.scheme,
        dims=dims,
        seq_len=args.seq_len if args.seq_len is not None else model.max_positions,
        micro_batch=args.micro_batch,
        microbatches=args.microbatches,
        dtype=args.dtype,
        sequence_parallel=args.sequence_parallel,
        schedule=args.schedule,
        recompute=args.recompute,
    )


def _mb(n: float) -> str:
    mb = n / 1e6
    if mb >= 100:
        return f"{mb:,.0f}"
    return f"{mb:.2f}" if mb >= 1 else f"{mb:.3g}"


def console_for_tables() -> Console:
    """A console at least 140 columns wide, so piped tables keep whole numbers."""
    from rich.console import Console

    width = Console().width
    return Console(width=max(width, 140))


def render_text(pred: Prediction, console: Console) -> None:
    from rich.table import Table

    job = pred.job
    d = job.dims
    console.print(
        f"[bold]{job.model.name}[/bold] {job.scheme}  dp={d.dp} tp={d.tp} pp={d.pp} "
        f"({d.world_size} ranks, {pred.settings['gpus_per_node']} per node)  "
        f"s={job.seq_len} b={job.micro_batch} k={job.microbatches} {job.dtype}"
        + ("  sequence-parallel" if job.sequence_parallel else "")
        + ("  recompute" if job.recompute else "")
    )
    console.print(
        f"per rank per step, rank {pred.shown_rank} {d.coords(pred.shown_rank)} "
        f"(the most wire bytes); algorithm {pred.settings['algorithm']}, "
        f"intra-node {pred.settings['intra']}, {pred.settings['tflops']:g} TFLOP/s per rank; "
        "MB = 1e6 bytes"
    )
    book = {(v.op, v.role): v for v in pred.textbook_volumes}
    table = Table(title="communication per step", title_justify="left")
    cols = [
        "op",
        "role",
        "group",
        "calls",
        "S (MB)",
        "wire, ring (MB)",
        "wire, Study B (MB)",
        "textbook S (MB)",
    ]
    cols += [f"{n.name} (s)" for n in pred.networks]
    for col in cols:
        if col in ("op", "role"):
            width = len("reduce_scatter") if col == "op" else 4
            table.add_column(col, justify="left", no_wrap=True, min_width=width)
        else:
            table.add_column(col, justify="right", overflow="fold")
    for v in pred.volumes:
        tb = book.get((v.op, v.role))
        row = [
            v.op,
            v.role or "-",
            str(v.group_size),
            f"{v.calls:,}",
            _mb(v.bytes),
            _mb(v.wire_bytes),
            _mb(v.wire_bytes_b),
            _mb(tb.bytes) if tb else "-",
        ]
        row += [f"{n.op_times_s.get((v.op, v.role), 0.0):.4g}" for n in pred.networks]
        table.add_row(*row)
    for key, tb in book.items():
        if key not in {(v.op, v.role) for v in pred.volumes}:
            table.add_row(
                tb.op,
                tb.role,
                str(tb.group_size),
                "-",
                "-",
                "-",
                "-",
                _mb(tb.bytes),
                *["-" for _ in pred.networks],
            )
    total = sum(v.bytes for v in pred.volumes)
    table.add_row(
        "total",
        "",
        "",
        f"{sum(v.calls for v in pred.volumes):,}",
        _mb(total),
        _mb(sum(v.wire_bytes for v in pred.volumes)),
        _mb(sum(v.wire_bytes_b for v in pred.volumes)),
        _mb(sum(v.bytes for v in book.values())),
        *[f"{n.op_times_s and sum(n.op_times_s.values()):.4g}" for n in pred.networks],
        style="bold",
    )
    console.print(table)
    if not pred.networks:
        return
    nets = Table(title="step time per network (slowest rank)", title_justify="left")
    for col in (
        "network",
        "comm (s)",
        "compute (s)",
        "step (s)",
        "step, overlapped (s)",
        "comm share",
        "speedup",
    ):
        nets.add_column(col, justify="left" if col == "network" else "right")
    for n, speedup in zip(pred.networks, pred.speedups(), strict=True):
        nets.add_row(
            n.name,
            f"{n.comm_time_s:.4g}",
            f"{n.compute_time_s:.4g}",
            f"{n.step_time_s:.4g}",
            f"{n.step_time_overlap_s:.4g}",
            f"{n.comm_share:.1%}",
            f"{speedup:.2f}x",
        )
    console.print(nets)


def run(args: argparse.Namespace) -> int:
    job = job_from_args(args)
    pred = predict(
        job,
        get_profiles(args.net),
        intra=get_profile(args.intra),
        gpus_per_node=args.gpus_per_node,
        algorithm=args.algo,
        tflops=args.tflops,
        nics_per_node=args.nics_per_node,
    )
    if args.format == "json":
        print(json.dumps(pred.to_dict(), indent=2))
    else:
        render_text(pred, console_for_tables())
    return 0
