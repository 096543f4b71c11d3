"""The on-disk run format: schema, file layout, streaming writer, manifest, reader.

Runs are read through :func:`open_run` (lazy DuckDB views) or :func:`load_run`
(every event in memory); see :mod:`commlens.trace.reader`.
"""

from commlens.trace.reader import Run, RunView, StepRange, load_run, open_run
from commlens.trace.schema import EVENT_COLUMNS, EVENT_SCHEMA, FORMAT_VERSION

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "FORMAT_VERSION",
    "Run",
    "RunView",
    "StepRange",
    "load_run",
    "open_run",
]
