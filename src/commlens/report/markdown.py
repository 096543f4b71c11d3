"""Markdown renderer: pipe tables and the plots.

Written to a file, the plots go as PNG files into ``<name>_files/`` beside it
and are linked relatively (GitHub and most viewers show them); on stdout they
are embedded as base64 data URIs, so the output stands alone.

Every text made from run data (titles, headings, cells, facts, notes) is
escaped: HTML-significant characters become entities and Markdown's control
characters are backslash-escaped, so a module or group name shows as written
and never turns into markup.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

from commlens.report import plots
from commlens.report.base import Renderer
from commlens.report.document import Document, Section, hidden_rows, rows
from commlens.safefile import make_dir, write_output

_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
# Markdown's inline control characters; "_" only where it could open or close
# emphasis (not inside a word like all_reduce).
_MARKUP = re.compile(r"[\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_text(text: str) -> str:
    """``text`` as literal Markdown: one line, no HTML, no markup."""
    text = " ".join(str(text).splitlines())
    text = re.sub(r'[&<>"]', lambda m: _HTML[m[0]], text)
    text = _MARKUP.sub(lambda m: "\\" + m[0], text)
    return "\\" + text if text.startswith("#") else text


def _escape(cell: str) -> str:
    return md_text(cell) if cell else " "


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def table_md(section: Section) -> list[str]:
    head = [_escape(c.title) for c in section.columns]
    align = ["---:" if c.right else ":---" for c in section.columns]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_escape(x) for x in r) + " |" for r in rows(section)]
    if not section.table.num_rows:
        lines.append("| (none) |" + " |" * (len(head) - 1))
    return lines


class MarkdownRenderer(Renderer):
    name = "md"
    extension = ".md"

    def __init__(self, with_plots: bool = True, asset_dir: Path | None = None) -> None:
        self.with_plots = with_plots
        self.asset_dir = asset_dir

    def render(self, doc: Document) -> str:
        out = [f"# {md_text(doc.title)}"] if doc.title else []
        if doc.facts or doc.warnings:
            out.append("")
            out += [f"- **{md_text(label)}**: {md_text(value)}" for label, value in doc.facts]
            out += [f"- **warning**: {md_text(line)}" for line in doc.warnings]
        if doc.intro:
            out += ["", *[f"{md_text(line)}  " for line in doc.intro]]
        if doc.answer:
            out += ["", *[f"> {md_text(line)}  " for line in doc.answer]]
        if self.with_plots and doc.lead is not None:
            title, make = doc.lead
            out += ["", f"![{md_text(title)}]({self._image(plots.png(make()), 'lead', 0)})"]
        if doc.headline and doc.highlights:
            out += ["", *[f"- {md_text(line)}" for line in doc.highlights]]
        for section in doc.sections:
            if section.title:
                out += ["", f"## {md_text(section.title)}"]
            out += ["", *table_md(section)]
            if hidden_rows(section):
                out += ["", f"... {hidden_rows(section)} more rows (see the CSV or JSON output)"]
            if section.note:
                out += ["", *[f"{md_text(line)}  " for line in section.note.splitlines()]]
            if self.with_plots:
                for i, (title, make) in enumerate(section.plots):
                    image = self._image(plots.png(make()), section.key, i)
                    out += ["", f"![{md_text(title)}]({image})"]
        if doc.notes:
            out += ["", *[f"{md_text(line)}  " for line in doc.notes]]
        return "\n".join(out).lstrip("\n") + "\n"

    def _image(self, png: bytes, key: str, index: int) -> str:
        if self.asset_dir is None:
            return "data:image/png;base64," + base64.b64encode(png).decode()
        make_dir(self.asset_dir)
        stem = _SAFE_NAME.sub("-", key).strip("-") or "plot"
        name = f"{stem}-{index}.png" if index else f"{stem}.png"
        write_output(self.asset_dir / name, png, within=self.asset_dir)
        return f"{self.asset_dir.name}/{name}"
