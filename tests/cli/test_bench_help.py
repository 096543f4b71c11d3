"""`commlens bench --help` shows every default, and nccl-tests' short flags work."""

from __future__ import annotations

import argparse

import pytest

from commlens.cli.main import build_parser
from commlens.errors import UsageError


def _bench(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_help_shows_the_defaults_and_the_nccl_tests_flags() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices["bench"]  # type: ignore[union-attr]
    text = " ".join(sub.format_help().split())
    for shown in (
        "(default all_reduce)",
        "(default 8:64M)",
        "(default 2)",
        "(default 5)",
        "(default 20)",
        "(default float32)",
        "-b SIZE, --minbytes SIZE",
        "-e SIZE, --maxbytes SIZE",
        "-f F, --stepfactor F",
        "-n ITERS, --iters ITERS",
        "-w WARMUP, --warmup WARMUP, --warmup_iters WARMUP",
        "--nproc NPROC ranks in total",
    ):
        assert shown in text, shown


@pytest.mark.parametrize(
    ("argv", "sizes"),
    [
        ([], "8:64M"),
        (["--sizes", "1K,1M"], "1K,1M"),
        (["-b", "1K", "-e", "1M"], "1K:1M:2"),
        (["-b", "8", "-e", "128M", "-f", "4"], "8:128M:4"),
        (["-e", "1K"], "8:1K:2"),
    ],
)
def test_nccl_tests_range_flags(argv: list[str], sizes: str) -> None:
    from commlens.cli.bench import sizes_text

    assert sizes_text(_bench(argv)) == sizes


def test_iterations_and_warmup_short_flags() -> None:
    args = _bench(["-n", "50", "-w", "2", "--nproc-per-node", "2", "--nnodes", "1"])
    assert (args.iters, args.warmup, args.nproc_per_node, args.nodes) == (50, 2, 2, 1)


def test_sizes_and_range_flags_together_are_refused() -> None:
    from commlens.cli.bench import sizes_text

    with pytest.raises(UsageError, match="give --sizes or -b/-e/-f, not both"):
        sizes_text(_bench(["--sizes", "1K,2K", "-b", "1K"]))
