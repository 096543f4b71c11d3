"""Event kinds: what an event shares with others like it, interned once per rank.

The recording path looks an op up by ``(op, api, group, dtype, phase,
module)``, with the group object itself as the key (the group registry keeps
it alive); a new one is named (the group's name, ranks, size and role, the
dtype's name) and handed to the writer, whose id the packed record carries
(:data:`commlens.trace.packed.KIND_FIELDS`). When a group's name or role
changes the table is emptied, so kinds are looked up afresh.
"""

from __future__ import annotations

from typing import Any

from commlens.capture.groups import GroupRegistry
from commlens.capture.ops import dtype_name
from commlens.trace.packed import NO_PEER
from commlens.trace.writer import EventWriter


class EventKinds:
    """The rank's table of event kinds, ``table`` read directly by the recording path."""

    def __init__(self, groups: GroupRegistry) -> None:
        self.groups = groups
        # (op, api, group, dtype, phase, module) -> the writer's id of that event kind.
        self.table: dict[tuple[Any, ...], int] = {}
        groups.on_change = self.table.clear

    def new(self, raw: tuple[Any, ...], writer: EventWriter) -> int:
        """The writer's id of an event kind, its group given as the group object."""
        op, api, group, dtype, phase, module = raw
        info = self.groups.info(group)
        kind = writer.kind(
            (op, api, info.name, info.ranks, info.size, info.role, dtype_name(dtype), phase,
             module)
        )  # fmt: skip
        self.table[raw] = kind
        return kind

    def head(self, later: tuple[Any, ...], writer: EventWriter) -> tuple[Any, ...]:
        """The packed fields before the times of an op whose arguments were read later
        (``later``: make_call, api, phase, module, seq; :meth:`Recorder.on_deferred`)."""
        make_call, api, phase, module, seq = later
        op, group, count, dtype, bytes_in, bytes_out, size, peer, is_async, _ = make_call()
        raw = (op, api, group, dtype, phase, module)
        kind = self.table.get(raw)
        if kind is None:
            kind = self.new(raw, writer)
        return (kind, seq, count, bytes_in, bytes_out, size, NO_PEER if peer is None else peer,
                is_async)  # fmt: skip
