"""``commlens bench``: collective micro-benchmarks (nccl-tests semantics), optional fit."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlens.bench.names import BACKENDS, OPS
from commlens.bench.sizes import format_size, parse_size, parse_sizes
from commlens.cli.report import add_width_option
from commlens.errors import UsageError
from commlens.job.options import TOTAL_RANKS_HELP, TotalRanks, add_node_options, resolve_nproc
from commlens.numbers import number_type
from commlens.report.formats import FORMATS

MIN, MAX = "8", "64M"
DEFAULT_SIZES = f"{MIN}:{MAX}"

if TYPE_CHECKING:
    from rich.console import Console

    from commlens.bench.fit import OpFit
    from commlens.bench.runner import BenchConfig, BenchReport


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark collectives (nccl-tests semantics), optionally fit a network profile",
        description="Time collectives over N ranks (optionally on K emulated nodes joined by a "
        "shaped link) and report latency, algbw and busbw per op and size. nccl-tests' "
        "-b, -e, -f, -n and -w work as there (sizes in bytes with K/M/G = 1024-based).",
    )
    p.add_argument(
        "--ops",
        default="all_reduce",
        help=f"comma list of {','.join(OPS)} or 'all' (default all_reduce)",
    )
    p.add_argument(
        "--sizes",
        default=None,
        help=f"MIN:MAX[:FACTOR] (FACTOR 2 unless given) or a list such as 1K,1M "
        f"(default {DEFAULT_SIZES})",
    )
    p.add_argument(
        "-b", "--minbytes", default=None, metavar="SIZE", help=f"smallest size (default {MIN})"
    )
    p.add_argument(
        "-e", "--maxbytes", default=None, metavar="SIZE", help=f"largest size (default {MAX})"
    )
    p.add_argument(
        "-f",
        "--stepfactor",
        default=None,
        metavar="F",
        help="multiply the size by F from one size to the next (default 2)",
    )
    p.add_argument(
        "--nproc", type=int, default=2, action=TotalRanks, help=f"{TOTAL_RANKS_HELP} (default 2)"
    )
    add_node_options(p)
    p.add_argument(
        "--link",
        default=None,
        help="rate of each node's link, e.g. 500mbit, 2gbit (default: unshaped)",
    )
    p.add_argument(
        "-w",
        "--warmup",
        "--warmup_iters",
        dest="warmup",
        type=int,
        default=5,
        help="untimed calls per op and size (default 5)",
    )
    p.add_argument(
        "-n", "--iters", type=int, default=20, help="timed calls per op and size (default 20)"
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="torch.distributed backend (default auto: nccl with a GPU per rank, else gloo)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        help="float32, float16, bfloat16, int32, ... (default float32)",
    )
    p.add_argument("--format", default="text", choices=FORMATS, help="output format (default text)")
    p.add_argument(
        "-o", "--output", default=None, help="write the results to FILE (default: stdout)"
    )
    add_width_option(p)
    p.add_argument(
        "--fit",
        default=None,
        metavar="FILE.toml",
        help="fit alpha-beta per op and write a network profile",
    )
    p.add_argument("--fit-name", default=None, help="profile name (default: the file's stem)")
    p.add_argument(
        "--fit-min-size",
        default="0",
        help="fit only sizes of at least this, e.g. 64K (default 0: all)",
    )
    p.add_argument(
        "--fit-min-r2",
        default=None,
        type=number_type(high=1.0),
        metavar="R2",
        help="refuse the fit (write nothing) when an op that grew with size has r2 below "
        "this; below 0.9 it is written with a warning (default 0.5)",
    )
    p.set_defaults(func=run)


def sizes_text(args: argparse.Namespace) -> str:
    """--sizes, or the range nccl-tests' -b/-e/-f give (both: a usage error)."""
    parts = (args.minbytes, args.maxbytes, args.stepfactor)
    if all(part is None for part in parts):
        return args.sizes or DEFAULT_SIZES
    if args.sizes is not None:
        raise UsageError("give --sizes or -b/-e/-f, not both")
    low, high, factor = (
        p if p is not None else d for p, d in zip(parts, (MIN, MAX, "2"), strict=True)
    )
    return f"{low}:{high}:{factor}"


def _config(args: argparse.Namespace) -> BenchConfig:
    from commlens.bench.runner import BenchConfig  # torch loads only when a bench runs

    resolve_nproc(args)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if ops == ["all"]:
        ops = list(OPS)
    return BenchConfig(
        ops=ops,
        sizes=parse_sizes(sizes_text(args)),
        nproc=args.nproc,
        nodes=args.nodes,
        link=args.link,
        warmup=args.warmup,
        iters=args.iters,
        backend=args.backend,
        dtype=args.dtype,
    )


def _run_with_progress(cfg: BenchConfig, console: Console) -> BenchReport:
    """The bench under a progress bar (plain timed lines when stderr is no terminal)."""
    from commlens.bench.runner import run_bench
    from commlens.cli.progress import Progress
    from commlens.units import plural

    with Progress(console, "bench", total=len(cfg.ops) * len(cfg.sizes)) as progress:
        progress.update(f"starting {plural(cfg.nproc, 'rank')}", force=True)

        def on_row(row: dict[str, Any]) -> None:
            progress.update(f"{row['op']} {format_size(row['size_bytes'])} done", advance=1)

        return run_bench(cfg, on_row=on_row)


def _check_fit(args: argparse.Namespace, cfg: BenchConfig) -> tuple[Path | None, int]:
    """The --fit target and minimum size, checked so that the fit cannot fail for them later."""
    import torch

    from commlens.bench.ops import DTYPES, element_count
    from commlens.predict.profiles import check_profile_name

    if not args.fit:
        if args.fit_name is not None or args.fit_min_size != "0" or args.fit_min_r2 is not None:
            raise UsageError("--fit-name, --fit-min-size and --fit-min-r2 need --fit FILE.toml")
        return None, 0
    fit_path = Path(args.fit)
    if fit_path.suffix != ".toml":
        raise UsageError(f"--fit {args.fit}: the profile file must end in .toml")
    where = "--fit-name" if args.fit_name is not None else f"--fit {args.fit} (the profile's name)"
    check_profile_name(fit_path.stem if args.fit_name is None else args.fit_name, where)
    if cfg.nproc < 2:
        raise UsageError("--fit needs at least 2 ranks (--nproc 2 or more)")
    fit_min = parse_size(args.fit_min_size) if args.fit_min_size != "0" else 0
    elem = torch.tensor([], dtype=DTYPES[cfg.dtype]).element_size()

    def fittable(op: str) -> set[int]:
        """The sizes (in bytes, as the ranks round them) of ``op`` that the fit uses."""
        counts = (element_count(op, size, elem, cfg.nproc) for size in cfg.sizes)
        return {c * elem for c in counts if c and c * elem >= fit_min}

    if not any(len(fittable(op)) >= 2 for op in cfg.ops):
        least = f" of at least {format_size(fit_min)}" if fit_min else ""
        raise UsageError(
            f"--fit needs at least two sizes{least} that {cfg.nproc} ranks can split; "
            "give more --sizes or a smaller --fit-min-size"
        )
    return fit_path, fit_min


def _check_targets(args: argparse.Namespace, fit_path: Path | None) -> None:
    """-o and --fit can be written (a directory or a missing folder fails before the bench)."""
    import os

    from commlens.safefile import resolve_target

    targets = {}
    for flag, path in (("-o", args.output), ("--fit", args.fit)):
        if path:
            real, in_place = resolve_target(path)
            if not in_place and not os.access(real.parent, os.W_OK):
                raise UsageError(f"{path}: folder {real.parent} is not writable")
            targets[flag] = real
    if fit_path is not None and targets.get("-o") == targets.get("--fit"):
        raise UsageError(f"-o and --fit name the same file {args.fit}; give them different names")


def check_args(args: argparse.Namespace) -> tuple[BenchConfig, Path | None, int]:
    """Every argument checked, before any rank starts: the config, --fit target and min size."""
    cfg = _config(args)
    fit_path, fit_min = _check_fit(args, cfg)
    _check_targets(args, fit_path)
    if cfg.link is not None:
        from commlens.netem.rate import parse_rate

        parse_rate(cfg.link)
    if cfg.emulated:
        from commlens.netem import iproute

        iproute.require_netns("an emulated link (--link/--nodes)")
    from commlens.bench.runner import check_bench_fits

    check_bench_fits(cfg)  # also resolves --backend (nccl needs GPUs)
    return cfg, fit_path, fit_min


def _fitted_profile(
    report: BenchReport, fits: list[OpFit], fit_path: Path, name: str, min_r2: float
) -> tuple[dict[str, Any], list[str]]:
    """The profile dict and the warnings on the fits' quality; refused (nothing written)
    if an op's fit is poor or the model would not load it."""
    from commlens.bench.fit import judge_fits, profile_dict
    from commlens.predict.profiles import profile_from_dict

    quality = judge_fits(fits, min_r2)
    if quality.refused:
        raise UsageError(
            f"poor fit: {'; '.join(quality.refused)} (the times scatter about the line: a busy "
            "host?); nothing written (bench again on a quieter host, fit larger sizes with "
            "--fit-min-size, or accept it with a lower --fit-min-r2)"
        )
    try:
        profile = profile_dict(report, fits, name)
        profile_from_dict(profile, f"fitted profile for {fit_path}")
    except UsageError as exc:
        raise UsageError(
            f"{exc}; nothing written (fit larger sizes with --fit-min-size, or a slower --link)"
        ) from None
    return profile, quality.warned


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from commlens.report.bench import bench_document, fit_line
    from commlens.report.output import emit

    cfg, fit_path, fit_min = check_args(args)
    err = Console(stderr=True)
    if cfg.link and cfg.nodes == 1:
        err.print("note: with --nodes 1 every rank talks over loopback; --link shapes nothing")
    report = _run_with_progress(cfg, err)
    emit(bench_document(report), args.output, args.format, width=args.width)
    if fit_path is not None:
        from commlens.bench.fit import R2_MIN, fit_report, write_profile

        name = fit_path.stem if args.fit_name is None else args.fit_name
        fits = fit_report(report, min_size=fit_min)
        min_r2 = R2_MIN if args.fit_min_r2 is None else args.fit_min_r2
        profile, warned = _fitted_profile(report, fits, fit_path, name, min_r2)
        write_profile(fit_path, profile)
        for f in fits:
            err.print(fit_line(f))
        for why in warned:
            err.print(
                f"warning: poor fit: {why}; the profile may predict worse than the "
                "built-in model of the link",
                markup=False,
            )
        err.print(f"wrote network profile {fit_path}")
    wrong = [f"{r['op']} {format_size(r['size_bytes'])}" for r in report.measured if not r["ok"]]
    if wrong:
        err.print(f"[bold red]wrong results:[/bold red] {', '.join(wrong)}")
        return 1
    return 0
