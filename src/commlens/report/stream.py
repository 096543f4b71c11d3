"""Render a stream of Arrow record batches (a query's result) batch by batch.

CSV and JSON write every row as it arrives, so memory holds a batch, not the
result; the output is what the CSV and JSON renderers give for the same table
(JSON: ``{"columns": [...], "rows": [{...}, ...]}``). A text table has to be
measured before it is drawn, so it shows the first ``max_rows`` rows and
counts the rest.

:class:`FdSink` writes to a file descriptor in pieces that never block for
long, so a Ctrl-C is seen at once even while a pipe is full.
"""

from __future__ import annotations

import os
import select
import stat
from collections.abc import Iterable
from typing import IO, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from commlens.report.csv import defuse, tidy
from commlens.report.document import Column, Document, Section
from commlens.report.json import dumps
from commlens.report.text import TextRenderer


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class FdSink:
    """Writes to ``fh``'s file descriptor, waiting in ``select`` (where a signal is
    handled) rather than in a ``write`` that a full pipe would block.

    A pipe, FIFO or terminal takes at most ``PIPE_BUF`` bytes a write once
    ``select`` says it is writable, so no write blocks; a regular file takes
    1 MiB pieces. After a write failed (a closed pipe, ``KeyboardInterrupt``)
    the rest is dropped, so a writer's clean-up cannot block or mask the error.
    """

    def __init__(self, fh: IO[bytes]) -> None:
        fh.flush()
        self.fh = fh
        try:
            self.fd: int | None = fh.fileno()
        except OSError:  # no descriptor (an in-memory stream): written as it is
            self.fd = None
        regular = self.fd is not None and stat.S_ISREG(os.fstat(self.fd).st_mode)
        self.piece = 1 << 20 if regular else select.PIPE_BUF
        self.failed = False

    @property
    def closed(self) -> bool:
        return False

    def write(self, data: bytes, /) -> int:
        if self.failed:
            return len(data)
        if self.fd is None:
            return self.fh.write(data)
        view = memoryview(data).cast("B")
        try:
            while view:
                _, ready, _ = select.select([], [self.fd], [], 0.2)
                if ready:
                    view = view[os.write(self.fd, view[: self.piece]) :]
        except BaseException:
            self.failed = True
            raise
        return len(data)

    def flush(self) -> None:
        pass


def write_stream(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    out: Sink,
    fmt: str,
    *,
    max_rows: int = 100,
    width: int | None = None,
) -> int:
    """Write ``batches`` (all of ``schema``) to ``out`` in ``fmt``; returns the row count."""
    if fmt == "csv":
        return _write_csv(batches, schema, out)
    if fmt == "json":
        return _write_json(batches, schema, out)
    if fmt == "text":
        return _write_text(batches, schema, out, max_rows, width)
    raise ValueError(f"unknown stream format {fmt!r}")


def _csv_table(table: pa.Table) -> pa.Table:
    table = tidy(table)
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
            field = table.schema.field(i)
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            table = table.set_column(i, field.name, pc.fill_null(table.column(i), ""))
    return defuse(table)


def _write_csv(batches: Iterable[pa.RecordBatch], schema: pa.Schema, out: Sink) -> int:
    options = pacsv.WriteOptions(quoting_style="needed")
    if not schema.names:
        return 0
    writer: pacsv.CSVWriter | None = None
    count = 0
    try:
        for batch in batches:
            table = _csv_table(pa.Table.from_batches([batch], schema))
            if writer is None:
                writer = pacsv.CSVWriter(out, table.schema, write_options=options)
            writer.write_table(table)
            count += batch.num_rows
        if writer is None:  # no rows: the header alone
            empty = _csv_table(schema.empty_table())
            writer = pacsv.CSVWriter(out, empty.schema, write_options=options)
    finally:
        if writer is not None:
            writer.close()
    return count


def _write_json(batches: Iterable[pa.RecordBatch], schema: pa.Schema, out: Sink) -> int:
    out.write(f'{{\n "columns": {dumps(schema.names)},\n "rows": ['.encode())
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        text = dumps(_json_rows(batch))[1:-1]  # the rows, without the list's brackets
        out.write(((", " if count else "") + text).encode())
        count += batch.num_rows
    out.write(b"]\n}\n")
    return count


def _json_rows(batch: pa.RecordBatch) -> list[dict[str, object]]:
    """The batch's rows, decimals as JSON numbers: DuckDB's ``sum()`` of integers
    (HUGEINT, a decimal of scale 0) as ints, other decimals as floats."""
    columns: dict[str, list[object]] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        dtype = column.type
        if pa.types.is_decimal(dtype) and dtype.scale == 0:
            columns[name] = [None if v is None else int(v) for v in column.to_pylist()]
        elif pa.types.is_decimal(dtype):
            columns[name] = column.cast(pa.float64()).to_pylist()
        else:
            columns[name] = column.to_pylist()
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def column_format(dtype: pa.DataType) -> str:
    """The text format of a result column: numbers right-aligned, the rest as text."""
    numeric = pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
    return "num" if numeric or pa.types.is_decimal(dtype) else "str"


def _write_text(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    out: Sink,
    max_rows: int,
    width: int | None,
) -> int:
    head: list[pa.RecordBatch] = []
    shown = count = 0
    for batch in batches:
        if shown < max_rows:
            part = batch.slice(0, max_rows - shown)
            head.append(part)
            shown += part.num_rows
        count += batch.num_rows
    table = pa.Table.from_batches(head, schema)
    columns = [Column(f.name, f.name, column_format(f.type)) for f in schema]
    note = ""
    if count > shown:
        note = (
            f"... {count - shown:,} more rows ({count:,} in all; --max-rows N or --format csv/json)"
        )
    doc = Document(title="", facts=[], sections=[Section("query", "", table, columns, note=note)])
    out.write(TextRenderer(width=width).render(doc).encode())
    return count
