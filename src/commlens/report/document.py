"""What a command prints, independent of how it is rendered.

A :class:`Document` is a title, a few facts (label: value), warnings, a few
plain sentences before the tables (``intro``) and after them (``notes``), and
a list of :class:`Section`; each section is a table (with the unit of every
column in its title), an optional note and optional plots. ``data`` is the
machine-readable form the JSON renderer prints. Every command's output is one
(``report``, ``compare``, ``validate``, ``bench``, ``sweep``, ``net``, ...);
the renderers in :mod:`commlens.report` are the only code that lays one out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from commlens.trace.files import format_ranks
from commlens.units import format_bytes

Figure = Any  # matplotlib.figure.Figure, imported lazily

NUMERIC = frozenset("int bytes size s ms us gbps gbit pct float x num rate".split())
"""The formats of numbers (shown right-aligned)."""


SHARE_SLACK = 1e-9
"""What a share may pass 100% (or fall below 0) by, for float rounding."""


def is_share(fmt: str) -> bool:
    """Whether a column of format ``fmt`` holds shares (parts of a whole, 0 to 1):
    ``pct``, or a percent template without a sign (``{:.1%}``; a signed one, ``{:+.1%}``,
    is a difference)."""
    return fmt == "pct" or (fmt.startswith("{") and fmt.endswith("%}") and "+" not in fmt)


def check_share(value: float, what: str) -> float:
    """``value`` when it is a share (0 to 1, or NaN for none); AssertionError when it
    is not: a share is a part of its whole by construction, so one above 100% is a
    defect of the figures, never a finding to print."""
    if not -SHARE_SLACK <= value <= 1 + SHARE_SLACK and value == value:
        raise AssertionError(f"{what} is {value:.4%}: a share must lie between 0% and 100%")
    return value


@dataclass(frozen=True)
class Column:
    """One displayed column: the table field, its title (with unit) and format."""

    key: str
    title: str
    fmt: str = "str"
    """str, int, bytes, size, s, ms, us, gbps, gbit, pct, float, x, rate, name, num,
    ranks, or a ``str.format`` template such as ``"{:.2f}"``"""
    align: str = ""
    """'left' or 'right'; '' lets the format decide (numbers right, text left)."""

    @property
    def right(self) -> bool:
        """Whether the column is shown right-aligned."""
        if self.align:
            return self.align == "right"
        return self.fmt in NUMERIC or self.fmt.startswith("{")


@dataclass
class Section:
    """One table of the report, with the plots that illustrate it."""

    key: str
    title: str
    table: pa.Table
    columns: Sequence[Column]
    note: str = ""
    """Shown under the table; each line its own paragraph."""
    plots: list[tuple[str, Callable[[], Figure]]] = field(default_factory=list)
    max_rows: int = 0
    """Show at most this many rows in text/md/html (0: all); JSON/CSV get all."""
    group_by: str = ""
    """A column key: the text table draws a rule where its value changes."""
    scope: str = ""
    """What the table covers when it is not the headline's steps ('every event, set-up
    included'): a page shows it beside the title; its plots say their own scope."""

    def __post_init__(self) -> None:
        """Every share column of every table any command shows is checked here."""
        names = set(self.table.column_names)
        for col in self.columns:
            if not is_share(col.fmt) or col.key not in names:
                continue
            for i, value in enumerate(self.table.column(col.key).to_pylist()):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    check_share(float(value), f"{self.title!r}, column {col.title!r}, row {i + 1}")


@dataclass
class Document:
    """Everything one command prints, in the order the renderers show it: title,
    facts, warnings, intro, highlights, sections, notes."""

    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    data: dict[str, Any] | list[Any] = field(default_factory=dict)
    """What the JSON renderer prints (an object, or a list for a listing)."""
    csv_table: pa.Table | None = None
    highlights: list[str] = field(default_factory=list)
    """A few sentences shown before the tables, as bullets."""
    intro: list[str] = field(default_factory=list)
    """Plain lines shown under the facts, before the tables."""
    notes: list[str] = field(default_factory=list)
    """Plain lines shown after the tables (verdicts, where files went, what next)."""
    headline: list[str] = field(default_factory=list)
    """The answer in a sentence or a few, where the highlights are not it (a verdict, a
    speedup): a page opens with it; empty: the highlights are the headline."""
    lead: tuple[str, Callable[[], Figure]] | None = None
    """The one chart that carries the headline (its title and a deferred figure): a page
    draws it under the headline, before the facts and tables."""

    @property
    def answer(self) -> list[str]:
        """What the page opens with: the headline, else the highlights."""
        return self.headline or self.highlights

    def section(self, key: str) -> Section:
        for section in self.sections:
            if section.key == key:
                return section
        raise KeyError(key)


def plot(name: str, *tables: Any) -> Callable[[], Figure]:
    """A deferred call of ``commlens.report.plots.<name>(*tables)`` (matplotlib is
    imported only when a renderer draws it)."""

    def make() -> Figure:
        from commlens.report import plots

        return getattr(plots, name)(*tables)

    return make


def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals; one that shows as zero has no sign ("-0.000000"
    would read as a negative time)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def format_cell(value: Any, fmt: str) -> str:
    """A value as displayed in text, Markdown and HTML tables."""
    if value is None:
        return "-"
    if fmt == "int":
        return f"{int(value):,}"
    if fmt == "bytes":
        return f"{round(value):,}"
    if fmt == "size":
        return format_bytes(value)
    if fmt == "s":
        return fixed(float(value), 6)
    if fmt == "ms":
        return fixed(float(value) * 1e3, 3)
    if fmt == "us":
        return fixed(float(value) * 1e6, 1)
    if fmt in ("gbps", "gbit"):
        return fixed(float(value), 3)
    if fmt == "pct":
        return fixed(float(value) * 100, 1)
    if fmt == "float":
        return f"{float(value):.3g}"
    if fmt == "x":
        return f"{float(value):.2f}x"
    if fmt == "rate":
        return f"{float(value):,.0f}"
    if fmt == "name":
        return str(value) if value else "(none)"
    if fmt == "num":
        return f"{value:.6g}" if isinstance(value, float) else str(value)
    if fmt == "ranks":
        return format_ranks(value)
    if fmt.startswith("{"):
        return fmt.format(value)
    return str(value)


def rows(section: Section) -> list[list[str]]:
    """The section's displayed cells, row by row (truncated to max_rows)."""
    table = section.table
    if section.max_rows and table.num_rows > section.max_rows:
        table = table.slice(0, section.max_rows)
    data = {c.key: table.column(c.key).to_pylist() for c in section.columns}
    return [
        [format_cell(data[c.key][i], c.fmt) for c in section.columns] for i in range(table.num_rows)
    ]


def hidden_rows(section: Section) -> int:
    n = section.table.num_rows
    return n - section.max_rows if section.max_rows and n > section.max_rows else 0
