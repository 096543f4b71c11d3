"""Stream the events of a Chrome-trace JSON file without loading it.

:func:`stream_events` yields each element of ``traceEvents`` (one dict at a
time, by ijson's C parser) and, once the stream is done, the top-level
fields (``distributedInfo``, ``baseTimeNanoseconds``, ...) whether they come
before or after the events: they are read from the head and the tail of the
bytes, which are kept as they stream past.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import ijson

from commlens.importers.sources import SourceError, open_binary, read_error

_KEEP = 1 << 18
_TOP_KEY = re.compile(
    rb'"(distributedInfo|baseTimeNanoseconds|schemaVersion|host_name|trace_id|traceName|record_shapes)"\s*:\s*'
)


class _Tee:
    """A binary reader that keeps the first and the last bytes it passed on."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.saw_events = False
        """Whether a ``"traceEvents"`` key went past (within one chunk)."""

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self.total += len(data)
        if not self.saw_events and b'"traceEvents"' in data:
            self.saw_events = True
        if len(self.head) < _KEEP:
            self.head += data[: _KEEP - len(self.head)]
        self.tail += data
        if len(self.tail) > 2 * _KEEP:
            del self.tail[: len(self.tail) - _KEEP]
        return data


def _top_fields(blob: bytes, where: str) -> dict[str, Any]:
    """Top-level fields found in ``blob`` (the head before the events, or the tail after)."""
    out: dict[str, Any] = {}
    if where == "head":
        cut = blob.find(b'"traceEvents"')
        blob = blob if cut < 0 else blob[:cut]
    text = blob.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    for match in _TOP_KEY.finditer(blob):
        start = len(blob[: match.end()].decode("utf-8", errors="replace"))
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        out[match.group(1).decode()] = value
    return out


class TraceStream:
    """The events of one trace file; ``top`` is complete once they were all read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.top: dict[str, Any] = {}
        self.bytes = 0

    def events(self) -> Iterator[Any]:
        """The elements of ``traceEvents`` (objects, unless the file is odd)."""
        path = self.path
        try:
            with open_binary(path) as raw:
                tee = _Tee(raw)
                yield from ijson.items(tee, "traceEvents.item", use_float=True)
                # the rest of the document (top-level fields after the events)
                while tee.read(1 << 16):
                    pass
                self.bytes = tee.total
                if not tee.saw_events:
                    raise SourceError(f"{path}: not a trace (a JSON document without traceEvents)")
                self.top = {
                    **_top_fields(bytes(tee.tail), "tail"),
                    **_top_fields(bytes(tee.head), "head"),
                }
        except (ijson.common.JSONError, OSError, EOFError, zlib.error) as exc:
            raise stream_error(path, exc) from None


def stream_error(path: Path, exc: BaseException) -> SourceError:
    """The one line for a JSON file that failed while streamed."""
    text = str(exc)
    if isinstance(exc, ijson.common.IncompleteJSONError) and (
        "premature EOF" in text or "Incomplete JSON" in text
    ):
        return SourceError(f"{path}: the JSON ends early (a truncated file)")
    if isinstance(exc, ijson.common.JSONError):
        return SourceError(f"{path}: not valid JSON ({' '.join(str(exc).split())[:100]})")
    return read_error(path, exc)
