"""CSV renderer: the document's tidy table (one row per op × size bucket × group)."""

from __future__ import annotations

import io
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from commlens.report.base import Renderer
from commlens.report.document import Document
from commlens.trace.files import format_ranks


def tidy(table: pa.Table) -> pa.Table:
    """List columns (pg_ranks) become text like '0-3' so every cell is a scalar."""
    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            values = [format_ranks(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(values, pa.string()))
    return table


FORMULA_START = r"^[=+\-@\t\r]"
"""A cell starting so is a formula to a spreadsheet (CSV injection)."""


def defuse(table: pa.Table) -> pa.Table:
    """Every text cell and column name that a spreadsheet would run as a formula
    (it starts with =, +, -, @, a tab or a carriage return) gets a leading ``'``:
    shown as text, never run. Numbers are left as they are."""
    names = ["'" + n if re.match(FORMULA_START, n) else n for n in table.column_names]
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            column = table.column(i)
            risky = pc.fill_null(pc.match_substring_regex(column, FORMULA_START), False)
            if pc.any(risky).as_py():
                quoted = pc.binary_join_element_wise(pa.scalar("'", field.type), column, "")
                table = table.set_column(i, field.name, pc.if_else(risky, quoted, column))
    return table.rename_columns(names)


class CsvRenderer(Renderer):
    name = "csv"
    extension = ".csv"

    def render(self, doc: Document) -> str:
        table = doc.csv_table if doc.csv_table is not None else doc.sections[0].table
        table = tidy(table)
        for i, field in enumerate(table.schema):
            if pa.types.is_string(field.type):
                table = table.set_column(i, field.name, pc.fill_null(table.column(i), ""))
        out = io.BytesIO()
        pacsv.write_csv(defuse(table), out, pacsv.WriteOptions(quoting_style="needed"))
        return out.getvalue().decode()
