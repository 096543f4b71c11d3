"""HTML renderer: one self-contained file (inline CSS, base64 PNG plots, no URLs).

Every page opens with its answer: the title (what was run), a box with the
headline (:attr:`Document.answer`) and under it the one chart that carries it
(:attr:`Document.lead`); the facts, the table of contents, the tables and
their plots follow.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from html import escape

from commlens.report import plots
from commlens.report.base import Renderer
from commlens.report.document import Document, Figure, Section, hidden_rows, rows

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.45em; margin: 0.2em 0 0.5em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #ddd; }
th { background: #f4f4f4; text-align: left; }
td { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
.note { color: #555; font-size: 0.9em; }
.warning { color: #a40; }
h2 .scope { font-size: 0.6em; font-weight: normal; color: #a40; }
.headline { background: #f6f8fa; padding: 0.5em 1.2em; border-left: 5px solid #2c7;
  font-size: 1.05em; margin: 0 0 0.8em; }
.headline ul { margin: 0.2em 0; padding-left: 1.2em; }
.headline p { margin: 0.3em 0; }
.headline.bad { border-left-color: #c33; }
figure.lead { margin: 0 0 1em; }
figure.lead img { margin: 0; }
details.facts { margin: 0.5em 0; }
details.facts summary { cursor: pointer; color: #555; }
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
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def image(title: str, make: Callable[[], Figure]) -> str:
    """A plot as an inline PNG."""
    data = base64.b64encode(plots.png(make())).decode()
    return f'<img alt="{escape(title)}" src="data:image/png;base64,{data}">'


def headline_html(doc: Document) -> str:
    """The box a page opens with (its answer), and the chart that carries it."""
    lines = doc.answer
    parts = []
    if lines:
        bad = any(line.lower().startswith(("validate: mismatch", "mismatch")) for line in lines)
        if doc.headline:
            inner = "".join(f"<p>{escape(line)}</p>" for line in lines)
        else:
            inner = "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"
        parts.append(f'<div class="headline{" bad" if bad else ""}" id="headline">{inner}</div>')
    if doc.lead is not None:
        title, make = doc.lead
        parts.append(f'<figure class="lead" id="lead">{image(title, make)}</figure>')
    return "\n".join(parts)


class HtmlRenderer(Renderer):
    name = "html"
    extension = ".html"

    def render(self, doc: Document) -> str:
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(doc.title or 'commlens')}</title><style>{_CSS}</style></head><body>",
        ]
        if doc.title:
            parts.append(f"<h1>{escape(doc.title)}</h1>")
        parts.append(headline_html(doc))
        parts += [f'<p class="warning">warning: {escape(w)}</p>' for w in doc.warnings]
        if doc.facts:
            items = "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in doc.facts)
            parts.append(
                f'<details class="facts"><summary>what was run ({len(doc.facts)} facts)</summary>'
                f"<ul>{items}</ul></details>"
            )
        parts += [f"<p>{escape(line)}</p>" for line in doc.intro]
        if doc.headline and doc.highlights:  # the headline box held the headline
            items = "".join(f"<li>{escape(line)}</li>" for line in doc.highlights)
            parts.append(f"<ul>{items}</ul>")
        links = "".join(
            f'<li><a href="#{escape(s.key)}">{escape(s.title)}</a></li>'
            for s in doc.sections
            if s.title
        )
        if len(doc.sections) > 1:
            parts.append(f"<nav><ol>{links}</ol></nav>")
        for section in doc.sections:
            scope = (
                f' <span class="scope">({escape(section.scope)})</span>' if section.scope else ""
            )
            heading = f"<h2>{escape(section.title)}{scope}</h2>" if section.title else ""
            parts.append(f'<section id="{escape(section.key)}">{heading}')
            parts.append(table_html(section))
            if hidden_rows(section):
                parts.append(
                    f'<p class="note">... {hidden_rows(section)} more rows '
                    "(see the CSV or JSON output)</p>"
                )
            parts += [f'<p class="note">{escape(line)}</p>' for line in section.note.splitlines()]
            parts += [image(title, make) for title, make in section.plots]
            parts.append("</section>")
        parts += [f'<p class="note">{escape(line)}</p>' for line in doc.notes]
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"
