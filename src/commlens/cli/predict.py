"""``commlens predict``: communication volume and time of a job, without running it."""

from __future__ import annotations

import argparse
from typing import Any

from commlens.cli.report import add_width_option
from commlens.errors import UsageError
from commlens.job.options import PREDICT, SHAPE_OVERRIDES, add_job_options, job_from_args
from commlens.predict.cost import ALGORITHMS
from commlens.predict.forecast import DEFAULT_TFLOPS, predict

FORMATS = ("text", "md", "html", "json")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predict per-step communication volume and time on network profiles",
        description="Analytical model of one training step: every collective per rank "
        "(exact for commlens's workloads, with conventions §2's textbook volume beside it) "
        "and its time on each network profile.",
    )
    add_job_options(p, PREDICT)
    p.add_argument(
        "--net",
        default="tcp-10g,ipoib-100g,rdma-100g",
        help="comma list of inter-node networks (profile names, FILE.toml, a link rate such as "
        "200mbit, or unshaped); speedups are over the first",
    )
    p.add_argument(
        "--gpus-per-node",
        "--nproc-per-node",
        dest="gpus_per_node",
        type=int,
        default=1,
        help="ranks per node, as torchrun's --nproc-per-node (default 1: every rank on "
        "its own node)",
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
    p.add_argument("--format", default="text", choices=FORMATS, help="output format (default text)")
    add_width_option(p)
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    """Refuse a bad or oversized scale argument before anything is modelled."""
    from commlens.predict.limits import check_scales

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
    for flag in SHAPE_OVERRIDES:
        if getattr(args, flag, None) is not None:
            scales[flag] = getattr(args, flag)
    check_scales(scales)


def run(args: argparse.Namespace) -> int:
    from commlens.predict.networks import network_profile, network_profiles
    from commlens.report.output import emit
    from commlens.report.predict import predict_document

    check_args(args)
    pred = predict(
        job_from_args(args, PREDICT),
        network_profiles(args.net),
        intra=network_profile(args.intra),
        gpus_per_node=args.gpus_per_node,
        algorithm=args.algo,
        tflops=args.tflops,
        nics_per_node=args.nics_per_node,
    )
    emit(predict_document(pred), None, args.format, width=args.width)
    return 0
