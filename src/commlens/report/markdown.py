"""Markdown renderer: pipe tables, plots embedded as base64 PNG data URIs."""

from __future__ import annotations

import base64

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

    def __init__(self, with_plots: bool = True) -> None:
        self.with_plots = with_plots

    def render(self, doc: Document) -> str:
        out = [f"# {doc.title}", ""]
        out += [f"- **{label}**: {value}" for label, value in doc.facts]
        out += [f"- **warning**: {line}" for line in doc.warnings]
        for section in doc.sections:
            out += ["", f"## {section.title}", ""]
            out += table_md(section)
            if hidden_rows(section):
                out += ["", f"... {hidden_rows(section)} more rows (see the CSV or JSON output)"]
            if section.note:
                out += ["", section.note]
            if self.with_plots:
                for title, make in section.plots:
                    data = base64.b64encode(plots.png(make())).decode()
                    out += ["", f"![{title}](data:image/png;base64,{data})"]
        return "\n".join(out) + "\n"
