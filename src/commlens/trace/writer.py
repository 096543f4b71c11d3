"""Streaming writer of one rank's events.

Appending only buffers packed records (:mod:`commlens.trace.packed`). A
writer thread writes the buffer as it is into ``.rank-NNNNN.parts/`` (new
event kinds first, then one ``part-NNNNNN.bin``, written under a temporary name,
fsynced and renamed into place whole) whenever ``flush_events`` events are
queued, and everything queued at least every ``flush_seconds`` seconds, so
the caller never converts anything. Before each timed write the thread runs
the caller's ``drain`` (events the caller holds back join the queue), after
it the caller's ``checkpoint``. A pass writes what was queued when it began:
events queued meanwhile wait for the next, so a job that queues faster than
a slow disk takes parts never keeps the checkpoint from its turn. An event
appended at time t is therefore on disk by t + ``flush_seconds`` + the time
one such write takes; a rank killed mid-run loses only what came later.
``close()`` turns the parts (one at a time: memory stays bounded) into the
row groups of ``rank-NNNNN.parquet``, written under a temporary name and
renamed into place once complete, and removes the parts: a reader never sees
a partial rank file.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq

from commlens.safefile import make_own_dir, open_own
from commlens.trace.layout import parts_dir, rank_file
from commlens.trace.live import LiveLock
from commlens.trace.packed import (
    KIND_FIELDS,
    NO_PEER,
    NO_VALUE,
    PACKED_DEVICE_EVENT,
    PACKED_EVENT,
    PART_GLOB,
    SITES_FILE,
    expand,
    kind_line,
    part_name,
    read_part,
)
from commlens.trace.schema import (
    DEVICE_COLUMN_NAMES,
    DEVICE_EVENT_SCHEMA,
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    RANK_KEY,
)

_pack = PACKED_EVENT.pack
_COLUMN = {name: i for i, name in enumerate((*EVENT_COLUMNS, *DEVICE_COLUMN_NAMES))}
_KIND_AT = tuple(_COLUMN[name] for name in KIND_FIELDS)
_PG_RANKS = KIND_FIELDS.index("pg_ranks")


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EventWriter:
    """Append events of one rank; write them in the background; finish into one file.

    Appending (:meth:`append_packed`) is one ``deque.append`` and a length
    test (thread-safe, no lock): the capture's hot path. The writer
    thread takes what is queued every ``flush_events`` events, or every
    ``flush_seconds`` seconds, and writes it as one part. Past
    :attr:`max_pending` full batches queued the appending thread waits, so
    memory stays bounded when the disk is slower than the job. A write error
    is passed to ``on_error`` once and ends background writing.
    """

    max_pending = 4

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        *,
        flush_events: int = 16384,
        flush_seconds: float = 2.0,
        on_error: Callable[[BaseException], None] | None = None,
        drain: Callable[[], None] | None = None,
        checkpoint: Callable[[], None] | None = None,
        device: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.flush_events = max(1, flush_events)
        self.flush_seconds = max(0.01, flush_seconds)
        self.on_error = on_error
        self.drain = drain
        self.checkpoint = checkpoint
        self.device = device
        """True: events carry the device columns (:meth:`append` rows end with them)."""
        schema = DEVICE_EVENT_SCHEMA if device else EVENT_SCHEMA
        meta = {**(schema.metadata or {}), RANK_KEY: str(rank).encode()}
        self.schema = schema.with_metadata(meta)
        self._queue: deque[bytes] = deque()  # packed events, oldest first
        # The queue length at which an appender must call _kick().
        self._next_kick = self.flush_events
        self._kinds: list[tuple[Any, ...]] = []
        self._kind_ids: dict[tuple[Any, ...], int] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # a batch is queued, or stop
        self._room = threading.Condition(self._lock)  # a part was written
        self._writing = 0  # events taken from the queue, not yet on disk
        self._n_written = 0
        self._stop = False
        self._flush_now = False
        self.error: BaseException | None = None
        self._parts = parts_dir(self.run_dir, rank)
        # held while this rank writes: no --force replaces the run meanwhile
        self._live = LiveLock(self.run_dir).share()
        make_own_dir(self._parts)  # never a planted symlink, nor files through one
        self._kinds_file: IO[str] = os.fdopen(open_own(self._parts / SITES_FILE, append=True), "a")
        self._kinds_written = 0
        self._n_parts = 0
        self.closed = False
        self._thread = threading.Thread(
            target=self._run, name=f"commlens-writer-{rank}", daemon=True
        )
        self._thread.start()

    # -- appending (any thread) -------------------------------------------
    def kind(self, fields: tuple[Any, ...]) -> int:
        """The id of an event kind: a tuple of KIND_FIELDS values."""
        kid = self._kind_ids.get(fields)
        if kid is None:
            with self._lock:
                kid = self._kind_ids.setdefault(fields, len(self._kinds))
                if kid == len(self._kinds):
                    self._kinds.append(fields)
        return kid

    def kinds(self) -> list[tuple[Any, ...]]:
        """The event kinds so far, in id order (a copy)."""
        with self._lock:
            return list(self._kinds)

    def append_packed(self, event: bytes) -> None:
        """Add one event packed by :data:`PACKED_EVENT` (``kind`` from :meth:`kind`)."""
        queue = self._queue
        queue.append(event)
        if len(queue) >= self._next_kick:
            self._kick()

    def busy(self) -> bool:
        """Whether another thread is inside the writer (a signal handler must not wait)."""
        if not self._lock.acquire(blocking=False):
            return True
        self._lock.release()
        return False

    def _kick(self) -> None:
        """A batch is queued: wake the writer thread; wait if too much is queued.

        The writer thread itself (appending from ``drain``) never waits: it is
        the one that makes room.
        """
        with self._lock:
            self._wake.notify()
            limit = self.max_pending * self.flush_events
            writer = self._thread
            waits = threading.get_ident() != writer.ident
            while waits and len(self._queue) >= limit and writer.is_alive() and self.error is None:
                self._room.wait(0.1)
            if self.error is not None:
                self._queue.clear()  # background writing ended: the events are dropped
            self._next_kick = min(len(self._queue) + self.flush_events, limit)

    def append(self, row: tuple[Any, ...]) -> None:
        """Add one event given as a tuple in EVENT_COLUMNS order, then DEVICE_COLUMN_NAMES
        for a device writer (``rank`` is this writer's; None for a null device value)."""
        kind = [row[i] for i in _KIND_AT]
        kind[_PG_RANKS] = tuple(kind[_PG_RANKS])
        c = _COLUMN
        peer = row[c["peer"]]
        extra: tuple[int, ...] = ()
        pack = _pack
        if self.device:
            pack = PACKED_DEVICE_EVENT.pack
            extra = tuple(
                NO_VALUE if row[c[name]] is None else int(row[c[name]])
                for name in DEVICE_COLUMN_NAMES
            )
        self.append_packed(
            pack(
                self.kind(tuple(kind)),
                row[c["seq"]],
                row[c["count"]],
                row[c["bytes_in"]],
                row[c["bytes_out"]],
                row[c["size_bytes"]],
                NO_PEER if peer is None else peer,
                bool(row[c["is_async"]]),
                row[c["t_issue_ns"]],
                row[c["t_end_ns"]],
                row[c["t_wait_ns"]],
                row[c["step"]],
                *extra,
            )
        )

    @property
    def n_events(self) -> int:
        """Events appended so far."""
        return self._n_written + self._writing + len(self._queue)

    @property
    def buffered(self) -> int:
        """Events held in memory, not yet written."""
        return len(self._queue) + self._writing

    def flush(self) -> None:
        """Write everything queued so far; wait until it is on disk."""
        with self._lock:
            target = self.n_events  # later appends (other threads) are not waited for
            self._flush_now = True
            self._wake.notify()
            while self._n_written < target and self._thread.is_alive() and self.error is None:
                self._room.wait(0.1)
        self._raise_error()

    # -- the writer thread ------------------------------------------------
    def _run(self) -> None:
        queue, size, period = self._queue, self.flush_events, self.flush_seconds
        due = time.monotonic() + period  # the next timed write
        while True:
            with self._lock:
                if not self._stop and not self._flush_now and len(queue) < size:
                    self._wake.wait(max(0.0, due - time.monotonic()))
                stop, asked = self._stop, self._flush_now
                self._flush_now = False
            now = time.monotonic()
            timed = not stop and now >= due
            if timed:
                due = now + period
                if not self._hook(self.drain):
                    return
            # What is queued now, no more: a job that queues events faster than
            # parts are written never keeps this pass from its checkpoint. Full
            # batches only, unless it is time (or asked) to write it all.
            todo = len(queue)
            if not (stop or asked or timed):
                todo -= todo % size
            while todo > 0:
                n = min(todo, size)
                todo -= n
                self._writing = n
                popleft = queue.popleft
                batch = b"".join([popleft() for _ in range(n)])
                try:
                    self._write_part(batch)
                except Exception as exc:
                    self._failed(exc)
                    return
                with self._lock:
                    self._n_written += n
                    self._writing = 0
                    self._next_kick = min(len(queue) + size, self.max_pending * size)
                    self._room.notify_all()
            if timed and not self._hook(self.checkpoint):
                return
            if stop and not queue:
                return

    def _hook(self, hook: Callable[[], None] | None) -> bool:
        """Run a caller's hook on this thread; False (background writing ends) if it raised."""
        if hook is None:
            return True
        try:
            hook()
        except Exception as exc:
            self._failed(exc)
            return False
        return True

    def _write_part(self, packed: bytes) -> None:
        # Kinds before the events that name them: a part on disk is readable.
        new = self._kinds[self._kinds_written :]
        if new:
            self._kinds_file.write("".join(kind_line(kind) for kind in new))
            self._kinds_file.flush()
            os.fsync(self._kinds_file.fileno())
            self._kinds_written += len(new)
        path = self._parts / part_name(self._n_parts)
        tmp = path.with_suffix(".tmp")  # not a part to a reader until renamed
        with os.fdopen(open_own(tmp), "wb") as fh:
            fh.write(packed)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_path(self._parts)  # the rename too survives a crash of the machine
        self._n_parts += 1

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self.error = exc
            self._writing = 0
            self._queue.clear()
            self._room.notify_all()
        if self.on_error is not None:
            self.on_error(exc)

    def _raise_error(self) -> None:
        if self.error is not None and self.on_error is None:
            raise self.error

    # -- finishing ----------------------------------------------------------
    def close(self, timeout: float | None = None) -> Path:
        """Write what is left, turn the parts into the rank file and return its path.

        ``timeout`` bounds the wait for the writer thread (a signal handler
        must not hang); past it the parts already written are what is kept.
        """
        final = rank_file(self.run_dir, self.rank)
        with self._lock:
            if self.closed:
                return final
            self.closed = True
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"rank {self.rank}: events still being written")
        self._kinds_file.close()
        self._raise_error()
        kinds = list(self._kinds)
        tmp = final.with_name(f".{final.name}.tmp")
        sink = os.fdopen(open_own(tmp), "wb")  # a link or FIFO planted there: refused, kept
        try:
            with sink, pq.ParquetWriter(sink, self.schema, compression="zstd") as out:
                parts = sorted(self._parts.glob(PART_GLOB))
                for part in parts:
                    out.write_table(expand(read_part(part), kinds, self.rank, self.schema))
                if not parts:
                    out.write_table(self.schema.empty_table())
                out.close()
                sink.flush()
                os.fsync(sink.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # the parts stay: the rank reads as unfinished
            raise
        os.replace(tmp, final)  # complete: only now does a reader see it
        fsync_path(self.run_dir)
        shutil.rmtree(self._parts, ignore_errors=True)
        self._live.release()
        return final
