"""HTML renderer: one self-contained file (inline CSS, base64 PNG plots, no URLs)."""

from __future__ import annotations

import base64
from html import escape

from commlens.report import plots
from commlens.report.base import Renderer
from commlens.report.document import Document, Section, hidden_rows, rows

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #ddd; }
th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 0.9em; }
.warning { color: #a40; }
.highlights { background: #f6f8fa; padding: 0.6em 2em; border-left: 4px solid #2c7; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
"""


def table_html(section: Section) -> str:
    head = "".join(f"<th>{escape(c.title)}</th>" for c in section.columns)
    body = []
    for cells in rows(section):
        tds = "".join(
            f'<td class="num">{escape(x)}</td>' if c.right else f"<td>{escape(x)}</td>"
            for c, x in zip(section.columns, cells, strict=True)
        )
        body.append(f"<tr>{tds}</tr>")
    if not section.table.num_rows:
        body.append(f'<tr><td colspan="{len(section.columns)}">(none)</td></tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class HtmlRenderer(Renderer):
    name = "html"
    extension = ".html"

    def render(self, doc: Document) -> str:
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(doc.title or 'commlens')}</title><style>{_CSS}</style></head><body>",
        ]
        heading = f"<h1>{escape(doc.title)}</h1>" if doc.title else ""
        if doc.facts or doc.warnings:
            parts.append(heading + "<ul>")
            parts += [f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in doc.facts]
            parts += [f'<li class="warning">warning: {escape(w)}</li>' for w in doc.warnings]
            parts.append("</ul>")
        elif heading:
            parts.append(heading)
        parts += [f"<p>{escape(line)}</p>" for line in doc.intro]
        if doc.highlights:
            items = "".join(f"<li>{escape(line)}</li>" for line in doc.highlights)
            parts.append(f'<ul class="highlights">{items}</ul>')
        links = "".join(
            f'<li><a href="#{escape(s.key)}">{escape(s.title)}</a></li>'
            for s in doc.sections
            if s.title
        )
        if len(doc.sections) > 1:
            parts.append(f"<nav><ol>{links}</ol></nav>")
        for section in doc.sections:
            heading = f"<h2>{escape(section.title)}</h2>" if section.title else ""
            parts.append(f'<section id="{escape(section.key)}">{heading}')
            parts.append(table_html(section))
            if hidden_rows(section):
                parts.append(
                    f'<p class="note">... {hidden_rows(section)} more rows '
                    "(see the CSV or JSON output)</p>"
                )
            parts += [f'<p class="note">{escape(line)}</p>' for line in section.note.splitlines()]
            for title, make in section.plots:
                data = base64.b64encode(plots.png(make())).decode()
                parts.append(f'<img alt="{escape(title)}" src="data:image/png;base64,{data}">')
            parts.append("</section>")
        parts += [f'<p class="note">{escape(line)}</p>' for line in doc.notes]
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"
