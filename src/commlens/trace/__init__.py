"""The on-disk run format: schema, streaming writer, manifest, reader."""

from commlens.trace.reader import Run, load_run
from commlens.trace.schema import EVENT_COLUMNS, EVENT_SCHEMA, FORMAT_VERSION

__all__ = ["EVENT_COLUMNS", "EVENT_SCHEMA", "FORMAT_VERSION", "Run", "load_run"]
