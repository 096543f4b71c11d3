"""A rank's ops in flight and its stacks: the run's side files for a hang.

``inflight-NNNNN.json`` (written by the capture's writer thread at each
checkpoint, :mod:`commlens.capture.inflight`): ``format`` (:data:`INFLIGHT_FORMAT`),
``rank``, ``pid``, ``t_ns``, ``events`` (the rank's count of events so far) and
``ops``, one object per op in flight. ``stacks-NNNNN.txt``: every thread's
Python stack, written by the rank's interpreter when it receives
:data:`STACK_SIGNAL` (sent by the hang watchdog, :mod:`commlens.launch.watchdog`).
Both are read here, by the watchdog and by the doctor alike.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commlens.safefile import read_bytes
from commlens.trace.layout import inflight_path

INFLIGHT_FORMAT = "commlens-inflight"
STACK_SIGNAL = signal.SIGUSR2
"""The signal on which a rank writes its threads' stacks into its stacks file."""
MAX_SIDE_FILE = 64 << 20
"""The most bytes of one in-flight or stacks file read."""


@dataclass(frozen=True)
class InFlight:
    """What one rank's in-flight file says."""

    events: int
    """The rank's count of events written when the file was."""
    ops: list[dict[str, Any]]
    """Its ops in flight (each a JSON object; anything else is left out)."""


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A side file's JSON object, or None where it is missing, unreadable, not one, or a
    link (never followed)."""
    try:
        data = json.loads(read_bytes(path, limit=MAX_SIDE_FILE, follow=False))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_inflight(run_dir: Path, rank: int) -> InFlight | None:
    """``rank``'s in-flight file, or None where there is none to read."""
    data = read_json_object(inflight_path(run_dir, rank))
    if data is None:
        return None
    ops = data.get("ops")
    events = data.get("events")
    return InFlight(
        events if isinstance(events, int) and not isinstance(events, bool) else 0,
        [o for o in ops if isinstance(o, dict)] if isinstance(ops, list) else [],
    )
