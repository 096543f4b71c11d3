"""``commlens net``: the network profiles the model can use (list, show), and cleanup."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from commlens.cli.predict import console_for_tables
from commlens.predict.profiles import builtin_profiles, get_profile

if TYPE_CHECKING:
    from commlens.predict.profiles import NetworkProfile


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "net",
        help="list or show network profiles (latency, bandwidth, source)",
        description="Network profiles are TOML files; built-ins ship with commlens and "
        "`commlens bench --fit FILE.toml` writes calibrated ones.",
    )
    actions = p.add_subparsers(dest="net_action", metavar="ACTION")
    ls = actions.add_parser("list", help="list the built-in profiles")
    ls.add_argument("--format", default="text", choices=("text", "json"))
    ls.set_defaults(func=run_list)
    show = actions.add_parser("show", help="show one profile (a built-in name or FILE.toml)")
    show.add_argument("name", help="built-in name (see `commlens net list`) or path to FILE.toml")
    show.add_argument("--format", default="text", choices=("text", "json"))
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


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    profiles = builtin_profiles()
    if args.format == "json":
        print(json.dumps([p.to_dict() for p in profiles], indent=2))
        return 0
    table = Table(title="network profiles (built-in)", title_justify="left")
    for col in (
        "name",
        "scope",
        "latency (µs)",
        "bandwidth (Gbit/s)",
        "efficiency",
        "effective (Gbit/s)",
        "description",
    ):
        table.add_column(
            col, justify="left" if col in ("name", "scope", "description") else "right"
        )
    for p in profiles:
        table.add_row(
            p.name,
            p.scope,
            f"{p.latency_s * 1e6:.2f}",
            f"{p.bandwidth_Gbps:g}",
            f"{p.efficiency:.2f}",
            f"{p.effective_Gbps:g}",
            p.description,
        )
    console_for_tables().print(table)
    return 0


def _show_text(p: NetworkProfile) -> None:
    from rich.table import Table

    console = console_for_tables()
    table = Table(title=f"network profile {p.name}", title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    rows = [
        ("description", p.description),
        ("scope", p.scope),
        ("latency (µs)", f"{p.latency_s * 1e6:.3f}"),
        ("bandwidth (Gbit/s)", f"{p.bandwidth_Gbps:g}"),
        ("efficiency", f"{p.efficiency:.3f}"),
        ("effective (Gbit/s)", f"{p.effective_Gbps:.3f}"),
        ("source", p.source),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    if p.ops:
        ops = Table(title="per-op overrides", title_justify="left")
        for col in ("op", "alpha (µs)", "beta (s/byte)", "effective (Gbit/s)"):
            ops.add_column(col, justify="left" if col == "op" else "right")
        for op in sorted(p.ops):
            beta = p.beta(op)
            ops.add_row(
                op,
                f"{p.alpha(op) * 1e6:.3f}",
                f"{beta:.4g}",
                f"{8 / beta / 1e9:.3f}" if beta > 0 else "inf",
            )
        console.print(ops)


def run_show(args: argparse.Namespace) -> int:
    profile = get_profile(args.name)
    if args.format == "json":
        print(json.dumps(profile.to_dict(), indent=2))
    else:
        _show_text(profile)
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
