"""The one place ``whatif`` reads a run: its events and step windows as numpy arrays.

Reading goes through the public reader (:func:`commlens.trace.reader.load_run`);
every other module of the package works on :class:`Trace`, so a change of
reader touches only this file. A run the replay cannot honestly re-time is
refused with one line: a rank missing or damaged (its peers' collectives
would have no partner), no events, no step markers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.errors import RunFormatError
from commlens.report.document import format_ranks

COLUMNS = (
    "rank",
    "seq",
    "op",
    "pg_name",
    "pg_ranks",
    "role",
    "size_bytes",
    "peer",
    "is_async",
    "t_issue_ns",
    "t_end_ns",
    "t_wait_ns",
    "step",
)


@dataclass
class Trace:
    """A run's events (sorted by rank, then issue order) and step windows, as arrays.

    Strings are dictionary codes: ``op[i]`` indexes ``op_names``, ``group[i]``
    indexes ``groups`` (the members of each process group) and ``group_names``.
    Times are nanoseconds on rank 0's clock.
    """

    name: str
    world_size: int
    rank: np.ndarray
    op: np.ndarray
    op_names: list[str]
    group: np.ndarray
    group_names: list[str]
    groups: list[tuple[int, ...]]
    role: np.ndarray
    role_names: list[str]
    size_bytes: np.ndarray
    peer: np.ndarray
    """Global peer rank of a send/recv, -1 otherwise."""
    is_async: np.ndarray
    t_issue: np.ndarray
    t_end: np.ndarray
    t_wait: np.ndarray
    step: np.ndarray
    """The event's step, -1 when it has none."""
    step_rank: np.ndarray
    step_index: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    manifest: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def events(self) -> int:
        return int(self.rank.size)


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes and values of a string column (nulls become '')."""
    column = pc.fill_null(table.column(name), "")
    encoded = column.combine_chunks().dictionary_encode()
    return encoded.indices.to_numpy().astype(np.int32), [str(v) for v in encoded.dictionary]


def _ints(table: pa.Table, name: str, null: int) -> np.ndarray:
    return pc.fill_null(table.column(name), null).to_numpy().astype(np.int64)


def read_trace(path: str | Path) -> Trace:
    """The run in ``path`` for replay; :class:`RunFormatError` when it cannot be replayed."""
    from commlens.trace.reader import load_run

    run = load_run(path, quiet=True)
    where = str(path)
    if run.missing_ranks:
        raise RunFormatError(
            f"{where}: rank(s) {format_ranks(run.missing_ranks)} missing or unreadable; "
            "a replay needs every rank's events (their peers' collectives have no partner)"
        )
    events = run.events
    if not events.num_rows:
        raise RunFormatError(f"{where}: the run holds no communication events to replay")
    steps = run.steps_table()
    if not steps.num_rows:
        raise RunFormatError(
            f"{where}: the run has no step markers (optimizer steps or commlens.step()); "
            "whatif reports per-step times and needs them"
        )
    events = events.select(list(COLUMNS))
    group, group_names = _codes(events, "pg_name")
    first = np.full(len(group_names), -1, dtype=np.int64)
    first[group[::-1]] = np.arange(group.size)[::-1]
    members = events.column("pg_ranks").take(pa.array(first)).to_pylist()
    op, op_names = _codes(events, "op")
    role, role_names = _codes(events, "role")
    order = np.lexsort((_ints(steps, "step", 0), _ints(steps, "rank", 0)))
    return Trace(
        name=Path(path).name or where,
        world_size=run.world_size,
        rank=_ints(events, "rank", 0),
        op=op,
        op_names=op_names,
        group=group,
        group_names=group_names,
        groups=[tuple(int(r) for r in (m or ())) for m in members],
        role=role,
        role_names=role_names,
        size_bytes=_ints(events, "size_bytes", 0),
        peer=_ints(events, "peer", -1),
        is_async=pc.fill_null(events.column("is_async"), False).to_numpy(zero_copy_only=False),
        t_issue=_ints(events, "t_issue_ns", 0),
        t_end=_ints(events, "t_end_ns", 0),
        t_wait=_ints(events, "t_wait_ns", 0),
        step=_ints(events, "step", -1),
        step_rank=_ints(steps, "rank", 0)[order],
        step_index=_ints(steps, "step", 0)[order],
        step_start=_ints(steps, "t_start_ns", 0)[order],
        step_end=_ints(steps, "t_end_ns", 0)[order],
        manifest=run.manifest,
        warnings=list(run.warnings),
    )
