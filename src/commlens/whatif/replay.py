"""The discrete-event replay of a :class:`~commlens.whatif.model.Program`.

Each rank runs through its marks, spending each compute gap as measured. An
instance starts when its last member issued it and the instance before it on
its queue (group or p2p channel) has ended; member ``e`` ends ``dur[e]``
seconds later. A rank at a ``HOLD`` waits until that end; a rank that reaches
an instance not yet started is parked and resumed when it starts. Ranks
advance as far as they can before another is taken, so every event is
handled once: the replay is linear in the number of marks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commlens.errors import RunFormatError
from commlens.whatif.model import HOLD, ISSUE, Program


@dataclass
class Timeline:
    """Replayed times, in seconds from the program's time 0."""

    issue: np.ndarray
    """When each event was issued."""
    end: np.ndarray
    """When each event's op ended for its rank."""
    held: np.ndarray
    """How long the rank was held at the event's HOLD mark."""
    start: np.ndarray
    """When each instance started."""
    step_marks: np.ndarray
    """Times of the step marks: slot 2·row is the start of step row ``row``, 2·row + 1 its end."""


def replay(prog: Program, dur: np.ndarray) -> Timeline:
    """Replay ``prog`` with member ``e`` of an instance lasting ``dur[e]`` seconds."""
    n_ev, n_inst = prog.inst.size, prog.instances
    inst_of = prog.inst.tolist()
    members = prog.members.tolist()
    offsets = prog.offsets.tolist()
    first = prog.first_of_queue.tolist()
    d = dur.tolist()
    nan = float("nan")
    issue = [nan] * n_ev
    end = [nan] * n_ev
    held = [0.0] * n_ev
    missing = np.diff(prog.offsets).tolist()
    ready = [0.0] * n_inst
    start = [nan] * n_inst
    qend = [nan] * n_inst
    steps = [nan] * (2 * prog.trace.step_rank.size)
    parked: dict[int, list[int]] = {}
    n_ranks = len(prog.kinds)
    pos = [0] * n_ranks
    clock = [0.0] * n_ranks
    blocked = [False] * n_ranks
    todo = list(range(n_ranks - 1, -1, -1))

    def begin(i: int) -> None:
        """Start instance ``i`` and any that waited behind it on its queue."""
        while True:
            t = ready[i]
            if not first[i]:
                before = qend[i - 1]
                if before > t:
                    t = before
            start[i] = t
            last = t
            for k in range(offsets[i], offsets[i + 1]):
                e = members[k]
                t_e = t + d[e]
                end[e] = t_e
                if t_e > last:
                    last = t_e
            qend[i] = last
            waiting = parked.pop(i, None)
            if waiting:
                todo.extend(waiting)
            i += 1
            if i >= n_inst or first[i] or missing[i] or start[i] == start[i]:
                return

    while todo:
        r = todo.pop()
        kinds, args, gaps = prog.kinds[r], prog.args[r], prog.gaps[r]
        i, t, n = pos[r], clock[r], len(kinds)
        if blocked[r]:  # the instance it waited for has started: the hold ends
            e = args[i]
            t_end = end[e]
            if t_end > t:
                held[e] = t_end - t
                t = t_end
            blocked[r] = False
            i += 1
        while i < n:
            t += gaps[i]
            kind, a = kinds[i], args[i]
            if kind == ISSUE:
                issue[a] = t
                j = inst_of[a]
                if t > ready[j]:
                    ready[j] = t
                missing[j] -= 1
                if not missing[j] and (first[j] or qend[j - 1] == qend[j - 1]):
                    begin(j)
            elif kind == HOLD:
                t_end = end[a]
                if t_end != t_end:  # not started yet: park the rank
                    parked.setdefault(inst_of[a], []).append(r)
                    blocked[r] = True
                    break
                if t_end > t:
                    held[a] = t_end - t
                    t = t_end
            else:
                steps[a] = t
            i += 1
        pos[r], clock[r] = i, t
    stuck = [r for r in range(n_ranks) if blocked[r]]
    if stuck:
        raise RunFormatError(
            f"{prog.trace.name}: the replay deadlocked with rank {stuck[0]} waiting "
            "(ops the capture saw complete depend on ops issued later); the run's "
            "event order is inconsistent"
        )
    return Timeline(
        issue=np.array(issue),
        end=np.array(end),
        held=np.array(held),
        start=np.array(start),
        step_marks=np.array(steps),
    )
