"""Terminal renderer: rich tables, no colour, deterministic for a given width.

Every text from the document is printed as written (never read as rich markup).

Tables keep their natural width (cells are never cut): the console is made at
least as wide as the widest table, so a narrow terminal wraps lines instead
of truncating numbers.
"""

from __future__ import annotations

import io
import shutil

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from commlens.report.base import Renderer
from commlens.report.document import Document, Section, hidden_rows, rows


class TextRenderer(Renderer):
    name = "text"
    extension = ".txt"

    def __init__(self, width: int | None = None) -> None:
        self.width = width or max(100, shutil.get_terminal_size((160, 24)).columns)

    def render(self, doc: Document) -> str:
        out = io.StringIO()
        tables = [self._table(section) for section in doc.sections]
        probe = Console(width=10_000, color_system=None, file=io.StringIO())
        widest = max((probe.measure(t).maximum for t in tables), default=0)
        console = Console(
            file=out,
            width=max(self.width, widest),
            color_system=None,
            force_terminal=False,
            no_color=True,
            highlight=False,
            emoji=False,
            soft_wrap=False,
            legacy_windows=False,
            force_jupyter=False,
        )
        if doc.title:
            console.print(doc.title, style="bold", markup=False)
        for label, value in doc.facts:
            console.print(f"  {label}: {value}", markup=False)
        for line in doc.warnings:
            console.print(f"  warning: {line}", markup=False)
        for line in doc.intro:  # long lines wrap where the terminal wraps them
            console.print(line, soft_wrap=True, markup=False)
        if doc.highlights:
            console.print()
            for line in doc.highlights:
                console.print(f"* {line}", soft_wrap=True, markup=False)
        above = bool(doc.title or doc.facts or doc.warnings or doc.intro or doc.highlights)
        for i, (section, table) in enumerate(zip(doc.sections, tables, strict=True)):
            if above or i:
                console.print()
            console.print(table)
            if hidden_rows(section):
                console.print(f"  ... {hidden_rows(section)} more rows (see --format csv/json)")
            if section.note:
                console.print(f"  {section.note}", markup=False)
        if doc.notes and (above or doc.sections):
            console.print()
        for line in doc.notes:
            console.print(line, soft_wrap=True, markup=False)
        return out.getvalue()

    @staticmethod
    def _table(section: Section) -> Table:
        table = Table(
            title=Text(section.title) if section.title else None,
            box=box.SIMPLE_HEAD,
            title_justify="left",
            pad_edge=False,
            show_edge=False,
        )
        for column in section.columns:
            table.add_column(
                Text(column.title), justify="right" if column.right else "left", no_wrap=True
            )
        shown = rows(section)
        keys = section.table.column(section.group_by).to_pylist() if section.group_by else []
        for i, cells in enumerate(shown):  # a rule between groups (none after the last row)
            rule = bool(keys) and i + 1 < len(shown) and keys[i] != keys[i + 1]
            table.add_row(*map(Text, cells), end_section=rule)
        if not section.table.num_rows:
            table.add_row(*(["(none)"] + [""] * (len(section.columns) - 1)))
        return table
