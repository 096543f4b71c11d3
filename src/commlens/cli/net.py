"""``commlens net``: the network profiles the model can use (list, show), and cleanup."""

from __future__ import annotations

import argparse
from typing import Any

from commlens.cli.report import add_width_option
from commlens.report.formats import PAGE_FORMATS


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "net",
        help="list or show network profiles (latency, bandwidth, source)",
        description="Network profiles are TOML files; built-ins ship with commlens and "
        "`commlens bench --fit FILE.toml` writes calibrated ones.",
    )
    actions = p.add_subparsers(dest="net_action", metavar="ACTION")
    ls = actions.add_parser("list", help="list the built-in profiles")
    add_page_options(ls)
    ls.set_defaults(func=run_list)
    show = actions.add_parser("show", help="show one profile (a built-in name or FILE.toml)")
    show.add_argument("name", help="built-in name (see `commlens net list`) or path to FILE.toml")
    add_page_options(show)
    show.set_defaults(func=run_show)
    clean = actions.add_parser(
        "cleanup",
        help="remove what dead emulated runs left, as their records list (root)",
    )
    clean.add_argument(
        "--force", action="store_true", help="also remove runs whose owner is still alive"
    )
    clean.set_defaults(func=run_cleanup)
    p.set_defaults(func=lambda args: _help(p))


def add_page_options(parser: argparse.ArgumentParser, output: bool = False) -> None:
    """--format (of a page: no CSV) and --width, for a command that prints to stdout;
    with ``output``, -o too (the format then defaults to -o's suffix)."""
    parser.add_argument(
        "--format",
        default=None if output else "text",
        choices=PAGE_FORMATS,
        help=f"output format: {', '.join(PAGE_FORMATS)} "
        + ("(default: from -o's suffix, else text)" if output else "(default text)"),
    )
    if output:
        parser.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    add_width_option(parser)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_list(args: argparse.Namespace) -> int:
    from commlens.predict.profiles import builtin_profiles
    from commlens.report.net import profiles_document
    from commlens.report.output import emit

    emit(profiles_document(builtin_profiles()), None, args.format, width=args.width)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from commlens.predict.profiles import get_profile
    from commlens.report.net import profile_document
    from commlens.report.output import emit

    emit(profile_document(get_profile(args.name)), None, args.format, width=args.width)
    return 0


def run_cleanup(args: argparse.Namespace) -> int:
    """Remove what the records of dead emulated runs list; report what was left alone."""
    from commlens.netem import cleanup

    report = cleanup(force=args.force)
    for what in report.removed:
        print(f"removed: {what}")
    for what in report.left:
        print(f"left alone: {what}")
    print(f"removed {len(report.removed)} object(s), left {len(report.left)} alone")
    return 1 if report.failed else 0
