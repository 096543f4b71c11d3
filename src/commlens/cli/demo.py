"""``commlens demo``: the README's first command (being written)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="run the default demo")
    p.set_defaults(func=lambda args: 0)
