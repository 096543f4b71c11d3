"""``commlens whatif RUN --net A[,B,...]``: a captured run re-timed on other networks."""

from __future__ import annotations

import argparse
from typing import Any

from commlens.cli.report import add_steps_option, add_width_option
from commlens.predict.cost import ALGORITHMS
from commlens.report.formats import PAGE_FORMATS
from commlens.whatif.corrections import CORRECTIONS


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "whatif",
        help="replay a captured run on other networks or node layouts",
        description="Replays every rank of a captured run (`commlens run` or `commlens trace`): "
        "compute between calls as measured, each collective or send/recv from the cost model "
        "for its real size once its last member issued it. Prints, per network, the step "
        "time, communication share, exposed vs overlapped time, per-op and per-role time, the "
        "slowest rank and the speedup over the replay on the run's own link (model against model; "
        "the measured step beside it), with a self-check: the same "
        "replay fed the measured op times must give back the captured steps. "
        "`--format json -o PRED.json` keeps the answer for `commlens compare PRED.json RUN`: "
        "the prediction against a run measured on that network.",
    )
    p.add_argument("run", help="run directory (run.json + rank-*.parquet)")
    p.add_argument(
        "--net",
        required=True,
        help="comma list of inter-node networks: profiles as `commlens predict --net` takes "
        "them (built-in names or FILE.toml, e.g. a `commlens bench --fit` profile), link rates "
        "(200mbit: an emulated link of that rate) or unshaped (an emulated link without a rate)",
    )
    p.add_argument(
        "--profile",
        "--captured-net",
        dest="profile",
        default=None,
        metavar="PROFILE",
        help="profile of the link the run was captured on: a `commlens bench --fit` FILE.toml, "
        "a built-in name or a rate (1gbit); default: an emulated run's recorded rate, loopback "
        "for a gloo run on one host",
    )
    p.add_argument(
        "--op-times",
        choices=("fit", "model", "delta"),
        default="fit",
        help="an op's time on a network: the network's cost-model time plus a CPU term per "
        "op kind fitted from the run's own op times against the own link (fit, default), the "
        "cost model's alone (model), or its measured time plus the model's difference from "
        "the own link (delta)",
    )
    p.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="CORRECTION",
        help="switch one correction of the op times off (repeatable): "
        + ", ".join(c.name for c in CORRECTIONS)
        + "; the answer lists those applied",
    )
    p.add_argument(
        "--dp",
        type=int,
        default=None,
        metavar="N",
        help="data-parallel scale-out of a DP/ZeRO job: its dp groups grow to N ranks (a "
        "multiple of the run's dp degree), the same per-rank work on each replica",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="place the ranks (with --dp: the scale-out's) on K nodes",
    )
    p.add_argument(
        "--ranks-per-node",
        type=int,
        default=None,
        help="G ranks per node (default: the run's emulated nodes, else one rank per node)",
    )
    p.add_argument(
        "--intra",
        default=None,
        help="profile of links inside a node (default: loopback for a gloo run, else nvlink)",
    )
    p.add_argument("--algo", default="ring", choices=ALGORITHMS, help="collective algorithm")
    p.add_argument(
        "--format",
        choices=PAGE_FORMATS,
        default=None,
        help="output format (default: from -o's suffix, else text)",
    )
    p.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    add_width_option(p)
    add_steps_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlens.cli.memory import keep_freed_memory, no_huge_pages
    from commlens.report.output import emit
    from commlens.report.whatif import build_whatif_document
    from commlens.whatif.study import run_study

    keep_freed_memory()
    no_huge_pages()
    study = run_study(
        args.run,
        args.net,
        steps=args.steps,
        nodes=args.nodes,
        ranks_per_node=args.ranks_per_node,
        intra=args.intra,
        algorithm=args.algo,
        captured_net=args.profile,
        op_times=args.op_times,
        dp=args.dp,
        without=tuple(args.without),
    )
    emit(build_whatif_document(study), args.output, args.format, width=args.width)
    return 0
