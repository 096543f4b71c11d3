"""CSV renderer: the document's tidy table (one row per op × size bucket × group)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from commlens.report.base import Renderer
from commlens.report.document import Document, format_ranks


def tidy(table: pa.Table) -> pa.Table:
    """List columns (pg_ranks) become text like '0-3' so every cell is a scalar."""
    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            values = [format_ranks(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(values, pa.string()))
    return table


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
        pacsv.write_csv(table, out, pacsv.WriteOptions(quoting_style="needed"))
        return out.getvalue().decode()
