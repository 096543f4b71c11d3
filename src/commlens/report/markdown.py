"""Markdown renderer: pipe tables and the plots.

Written to a file, the plots go as PNG files into ``<name>_files/`` beside it
and are linked relatively (GitHub and most viewers show them); on stdout they
are embedded as base64 data URIs, so the output stands alone.
"""

from __future__ import annotations

import base64
from pathlib import Path

from commlens.report import plots
from commlens.report.base import Renderer
from commlens.report.document import Document, Section, hidden_rows, rows
from commlens.report.text import _RIGHT


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|") if cell else " "


def table_md(section: Section) -> list[str]:
    head = [_escape(c.title) for c in section.columns]
    align = ["---:" if c.fmt in _RIGHT else ":---" for c in section.columns]
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
        out = [f"# {doc.title}", ""]
        out += [f"- **{label}**: {value}" for label, value in doc.facts]
        out += [f"- **warning**: {line}" for line in doc.warnings]
        if doc.highlights:
            out += ["", *[f"> {line}  " for line in doc.highlights]]
        for section in doc.sections:
            out += ["", f"## {section.title}", ""]
            out += table_md(section)
            if hidden_rows(section):
                out += ["", f"... {hidden_rows(section)} more rows (see the CSV or JSON output)"]
            if section.note:
                out += ["", section.note]
            if self.with_plots:
                for i, (title, make) in enumerate(section.plots):
                    out += ["", f"![{title}]({self._image(plots.png(make()), section.key, i)})"]
        return "\n".join(out) + "\n"

    def _image(self, png: bytes, key: str, index: int) -> str:
        if self.asset_dir is None:
            return "data:image/png;base64," + base64.b64encode(png).decode()
        self.asset_dir.mkdir(parents=True, exist_ok=True)
        name = f"{key}-{index}.png" if index else f"{key}.png"
        (self.asset_dir / name).write_bytes(png)
        return f"{self.asset_dir.name}/{name}"
