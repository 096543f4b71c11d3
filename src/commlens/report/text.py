"""Terminal renderer: rich tables, no colour, deterministic for a given width.

Every text from the document is printed as written (never read as rich markup).

The width is ``--width`` (the renderer's ``width``), else ``$COLUMNS``, else the
terminal's; output that is not a terminal (a file, a pipe) keeps every table
at its natural width unless one of the first two says otherwise. A table wider
than the width is fitted to it: column titles wrap at their spaces first, then
text cells at theirs, then words longer than half the width fold, the columns
with the most room to give shrinking first. Numbers are never wrapped nor cut:
a table whose columns cannot shrink enough is shown in parts, each with the
row's key (its leading text columns, and the leading numbers, such as a step or
a size bucket, that tell its rows apart) and as many others as fit. Prose (facts,
warnings, intro, highlights, notes) wraps at the width, with a hanging indent.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from commlens.report.base import Renderer
from commlens.report.document import Document, Section, hidden_rows, rows
from commlens.units import ascii_int

TEXT_FLOOR = 12
"""A text column shrinks to no fewer columns than this (or its longest title word)."""
WORD_SHARE = 0.5
"""A text cell's word up to this share of the width is never folded (an id, a path):
the table is shown in parts instead."""


def default_width() -> int | None:
    """``$COLUMNS`` when set, else the terminal's width; None when stdout is no terminal."""
    columns = os.environ.get("COLUMNS", "")
    if (width := ascii_int(columns, 1 << 20)) is not None and width > 0:
        return width
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return None


GAP, TIGHT_GAP = 3, 2
"""Columns between two table columns: padding either side of a one-space rule, or
(for a table that fits in one part only so) the padding collapsed to one space."""


@dataclass(frozen=True)
class Extent:
    """Content widths of one column: natural (nothing wrapped), with only its title
    wrapped at its spaces (``cells``), with its text cells wrapped at their spaces too
    (``words``), and its floor: the longest title word and the widest cell for
    numbers (never wrapped), or for text its longest word up to ``fold`` columns
    and at least :data:`TEXT_FLOOR` (longer words fold)."""

    natural: int
    cells: int
    words: int
    floor: int


def _extent(title: str, values: Sequence[str], numeric: bool, fold: int) -> Extent:
    widest = max((cell_len(v) for v in values), default=0)
    title_word = max((cell_len(w) for w in title.split()), default=0)
    word = max((cell_len(w) for v in values for w in v.split()), default=0)
    cells = max(title_word, widest)
    if numeric:
        return Extent(max(cell_len(title), widest), cells, cells, cells)
    floor = max(title_word, min(widest, max(TEXT_FLOOR, min(word, fold))))
    return Extent(max(cell_len(title), widest), cells, max(title_word, word), floor)


def column_widths(extents: Sequence[Extent], room: int) -> list[int]:
    """Content widths that sum to at most ``room`` where the floors allow: titles wrap
    first, then text cells at their spaces, then long words fold; at each stage the
    column with the most room to give gives up one column at a time."""
    widths = [e.natural for e in extents]
    stages = ([e.cells for e in extents], [e.words for e in extents], [e.floor for e in extents])
    for floors in stages:
        excess = sum(widths) - room
        while excess > 0:
            i = max(range(len(widths)), key=lambda j: widths[j] - floors[j])
            if widths[i] <= floors[i]:
                break
            widths[i] -= 1
            excess -= 1
    return widths


def key_columns(
    numeric: Sequence[bool], cells: Sequence[Sequence[str]], fits: Callable[[list[int]], bool]
) -> list[int]:
    """The leading columns that name a row, repeated in every part of a split table: the
    leading text columns, then further leading columns (numbers too: a step, a size
    bucket) until no two rows show the same key, as far as ``fits`` allows."""
    keys: list[int] = []
    for i in range(len(numeric)):
        named = len({tuple(row[k] for k in keys) for row in cells}) == len(cells)
        if not fits([*keys, i]) or (numeric[i] and named):
            break
        keys.append(i)
    return keys


def table_parts(
    numeric: Sequence[bool],
    floors: Sequence[int],
    width: int,
    gap: int = GAP,
    cells: Sequence[Sequence[str]] = (),
) -> list[list[int]]:
    """The columns of each part of a table shown in ``width`` columns: all in one when
    their floors fit, else the row's key (:func:`key_columns` of the shown ``cells``,
    in at most half the width) repeated in each part with as many others as fit."""
    every = list(range(len(floors)))

    def need(cols: list[int]) -> int:
        return sum(floors[i] for i in cols) + gap * max(len(cols) - 1, 0)

    if need(every) <= width:
        return [every]
    keys = key_columns(numeric, cells, lambda cols: need(cols) <= width // 2)
    parts: list[list[int]] = []
    current: list[int] = []
    for i in every[len(keys) :]:
        if current and need([*keys, *current, i]) > width:
            parts.append([*keys, *current])
            current = []
        current.append(i)
    parts.append([*keys, *current])
    return parts


class TextRenderer(Renderer):
    name = "text"
    extension = ".txt"

    def __init__(self, width: int | None = None) -> None:
        self.width = width or default_width()

    def render(self, doc: Document) -> str:
        out = io.StringIO()
        tables = [self._tables(section, self.width) for section in doc.sections]
        probe = Console(width=10_000, color_system=None, file=io.StringIO())
        widest = max((probe.measure(t).maximum for ts in tables for t in ts), default=0)
        console = Console(
            file=out,
            width=max(self.width or 0, widest, 40),
            color_system=None,
            force_terminal=False,
            no_color=True,
            highlight=False,
            emoji=False,
            soft_wrap=False,
            legacy_windows=False,
            force_jupyter=False,
        )

        def prose(line: str, first: str = "", rest: str = "") -> None:
            for part in self._wrap(line, first, rest):
                console.print(part, markup=False, soft_wrap=True)

        if doc.title:  # wrapped like prose: at the width, or whole without one
            for part in self._wrap(doc.title, "", ""):
                console.print(part, style="bold", markup=False, soft_wrap=True)
        for label, value in doc.facts:
            prose(f"{label}: {value}", "  ", "      ")
        for line in doc.warnings:
            prose(f"warning: {line}", "  ", "    ")
        for line in doc.intro:
            prose(line)
        if doc.highlights:
            console.print()
            for line in doc.highlights:
                prose(line, "* ", "  ")
        above = bool(doc.title or doc.facts or doc.warnings or doc.intro or doc.highlights)
        for i, (section, parts) in enumerate(zip(doc.sections, tables, strict=True)):
            for n, table in enumerate(parts):
                if above or i or n:
                    console.print()
                console.print(table)
            if hidden_rows(section):
                console.print(f"  ... {hidden_rows(section)} more rows (see --format csv/json)")
            for line in section.note.splitlines():  # a paragraph per line
                prose(line, "  ", "  ")
        if doc.notes and (above or doc.sections):
            console.print()
        for line in doc.notes:
            prose(line, "", "  ")
        return out.getvalue()

    def _wrap(self, line: str, first: str, rest: str) -> list[str]:
        """``line`` wrapped at the width (words never broken), or whole without one."""
        if not self.width or cell_len(first + line) <= self.width:
            return [first + line]
        return textwrap.wrap(
            line,
            self.width,
            initial_indent=first,
            subsequent_indent=rest,
            break_long_words=False,
            break_on_hyphens=False,
        ) or [first + line]

    @staticmethod
    def _tables(section: Section, width: int | None) -> list[Table]:
        """The section as one table, or as several parts side by side no wider than
        ``width`` (see :func:`table_parts`); the title heads the first."""
        shown = rows(section)
        if not section.table.num_rows:
            shown = [["(none)"] + [""] * (len(section.columns) - 1)]
        numeric = [c.right for c in section.columns]
        extents = [
            _extent(c.title, [r[i] for r in shown], numeric[i], int((width or 0) * WORD_SHARE))
            for i, c in enumerate(section.columns)
        ]
        naturals, floors = [e.natural for e in extents], [e.floor for e in extents]
        gap, parts = GAP, [list(range(len(floors)))]
        if width is not None:
            parts = table_parts(numeric, floors, width, GAP, shown)
            if len(parts) > 1 and len(table_parts(numeric, floors, width, TIGHT_GAP)) == 1:
                gap, parts = TIGHT_GAP, [list(range(len(floors)))]
        keys = section.table.column(section.group_by).to_pylist() if section.group_by else []
        tables = []
        for n, cols in enumerate(parts):
            title = section.title if n == 0 else ""
            table = Table(
                title=Text(title) if title else None,
                box=box.SIMPLE_HEAD,
                title_justify="left",
                pad_edge=False,
                show_edge=False,
                collapse_padding=gap == TIGHT_GAP,
            )
            room = (width or 0) - gap * (len(cols) - 1)
            natural = [naturals[i] for i in cols]
            fitted = width is not None and sum(natural) > room
            widths = column_widths([extents[i] for i in cols], room) if fitted else []
            for j, i in enumerate(cols):
                table.add_column(
                    Text(section.columns[i].title),
                    justify="right" if numeric[i] else "left",
                    width=widths[j] if fitted else None,
                    overflow="fold",
                    no_wrap=not fitted,
                )
            for r, cells in enumerate(shown):  # a rule between groups (none after the last)
                rule = bool(keys) and r + 1 < len(shown) and keys[r] != keys[r + 1]
                table.add_row(*(Text(cells[i]) for i in cols), end_section=rule)
            tables.append(table)
        return tables
