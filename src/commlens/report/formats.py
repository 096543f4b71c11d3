"""The registry of output formats: pick a renderer by name or by file suffix."""

from __future__ import annotations

from pathlib import Path

from commlens.errors import UsageError
from commlens.report.base import Renderer

FORMATS = ("text", "md", "html", "json", "csv")
PAGE_FORMATS = FORMATS[:4]
"""The formats of a command whose output has no tidy table to write as CSV."""
_SUFFIXES = {
    ".txt": "text",
    ".md": "md",
    ".html": "html",
    ".htm": "html",
    ".json": "json",
    ".csv": "csv",
}


def get_renderer(name: str, *, width: int | None = None) -> Renderer:
    """The renderer for format ``name`` (one of FORMATS)."""
    if name == "text":
        from commlens.report.text import TextRenderer

        return TextRenderer(width=width)
    if name == "md":
        from commlens.report.markdown import MarkdownRenderer

        return MarkdownRenderer()
    if name == "html":
        from commlens.report.html import HtmlRenderer

        return HtmlRenderer()
    if name == "json":
        from commlens.report.json import JsonRenderer

        return JsonRenderer()
    if name == "csv":
        from commlens.report.csv import CsvRenderer

        return CsvRenderer()
    raise UsageError(f"unknown format {name!r}: use one of {', '.join(FORMATS)}")


def format_for(output: str | None, requested: str | None) -> str:
    """The format to use: ``requested`` if given, else guessed from ``output``'s suffix."""
    if requested:
        return requested
    if output and output != "-":
        suffix = Path(output).suffix.lower()
        if suffix not in _SUFFIXES:
            raise UsageError(
                f"cannot tell the format of {output!r} from its suffix: "
                f"use --format or one of {', '.join(sorted(_SUFFIXES))}"
            )
        return _SUFFIXES[suffix]
    return "text"
