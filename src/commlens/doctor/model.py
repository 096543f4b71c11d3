"""What a diagnosis reads and what it finds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("hang", "desync", "straggler", "dead_rank", "healthy")
"""A diagnosis's kinds, the JSON's ``kind``."""


@dataclass(frozen=True)
class Group:
    """A process group: name, what the job called it (role or description), global ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Op:
    """One op one rank issued, done or still in flight."""

    rank: int
    group: str
    seq: int
    """its index among the group's ops of its sort on this rank (collectives: from 1; the
    members' ops of one seq are one collective); a dump's own sequence id"""
    p2p: bool
    op: str
    dtype: str
    bytes_in: int
    shape: str
    """the sizes as the source gives them (a dump's tensor shapes, a run's element count)"""
    peer: int | None
    """global peer (send/recv) or root (rooted collectives)"""
    done: bool
    t_issue_ns: int
    t_end_ns: int | None = None
    step: int = -1
    site: str = ""
    """where it was called (file:line function), when known"""
    missing: tuple[int, ...] = ()
    """for an op in flight: the members that never issued their side of it"""
    error: str = ""
    """for an op in flight: the error it raised, when it failed"""

    def label(self) -> str:
        """``all_reduce #7 on group 0`` (the seq names the instance)."""
        what = f"{self.op} to {self.peer}" if self.op == "send" else self.op
        if self.op == "recv":
            what = f"recv from {self.peer}"
        return f"{what} #{self.seq} on group {self.group}"


@dataclass(frozen=True)
class RankFacts:
    """What is known of one rank's process."""

    rank: int
    status: str = "unknown"
    """running, ok, killed, exited, ... as the source says"""
    exit_code: int | None = None
    signal: str = ""
    recorded: bool = True
    """False: the rank left no record at all (no dump, no rank file)"""
    last_ns: int | None = None
    """the last time the rank was seen (its newest op's issue or end)"""
    host: str = ""

    @property
    def dead(self) -> bool:
        return bool(self.signal) or (self.exit_code is not None and self.exit_code != 0)


@dataclass(frozen=True)
class StepRuns:
    """The steps of a rank's collectives on a group, in order, as runs of one step (a
    number or two a step, where the steps themselves are one a collective)."""

    values: tuple[int, ...]
    lengths: tuple[int, ...]

    @staticmethod
    def of(steps: Any) -> StepRuns:
        import numpy as np

        steps = np.asarray(steps, np.int64)
        if not steps.size:
            return StepRuns((), ())
        starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
        lengths = np.diff(np.r_[starts, steps.size])
        return StepRuns(tuple(steps[starts].tolist()), tuple(lengths.tolist()))

    def steps(self) -> Any:
        """The steps, one a collective (a numpy array)."""
        import numpy as np

        return np.repeat(np.array(self.values, np.int64), np.array(self.lengths, np.int64))


@dataclass
class Evidence:
    """Every rank's ops and facts, from one source."""

    source: str
    """what was read: 'commlens run' or 'Flight Recorder dumps (nccl 2.9)'"""
    path: str
    world_size: int
    groups: dict[str, Group]
    ops: dict[int, list[Op]]
    """per rank, in issue order: the ops the source kept (a run: all; a dump: its buffer)"""
    ranks: dict[int, RankFacts]
    stacks: dict[int, str] = field(default_factory=dict)
    """per rank, the Python stacks dumped while it hung (all threads)"""
    steps: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    """per rank, (step, t_start_ns, t_end_ns) windows, where the source has steps"""
    straggle: list[dict[str, float]] = field(default_factory=list)
    """per rank (a run only): arrival statistics of its matched collectives"""
    coll_steps: dict[tuple[int, str], StepRuns] = field(default_factory=dict)
    """(rank, group) -> the step of each of the rank's collectives there, by seq, where
    the source has steps and keeps fewer ops than it read"""
    completed_upto: dict[tuple[int, str], int] = field(default_factory=dict)
    """(rank, group) -> the last collective seq the rank completed there, where the source
    says so beyond its ops (a dump's ``pg_status``)"""
    stalled: dict[int, list[tuple[str, int, tuple[int, ...]]]] = field(default_factory=dict)
    """per rank, (group, seq, peers): a collective the rank issued and its peers completed
    but the rank never did (its device or its progress stopped)"""
    lateness: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    """per rank (a run only): (step, its mean lateness in s at the step's collectives)"""
    largest_wait: tuple[float, str] | None = None
    """(seconds, what) of the longest a rank waited for its peers"""
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Wait:
    """One rank waiting in an op for ranks that never issued it."""

    rank: int
    op: Op
    on: tuple[int, ...]


@dataclass
class Diagnosis:
    """What the doctor found: the kind, the ranks at its root, the sentences that say it."""

    kind: str
    headline: str
    root_ranks: list[int]
    victims: list[int] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)
    """one line per finding after the headline (roots first, then how the others wait)"""
    waits: list[Wait] = field(default_factory=list)
    cycle: list[int] = field(default_factory=list)
    dead_ranks: list[int] = field(default_factory=list)
    mismatch: list[dict[str, object]] = field(default_factory=list)
    """desync: the first op of each group where members disagree, one entry per rank"""
    stragglers: list[dict[str, float]] = field(default_factory=list)
    groups_state: list[dict[str, object]] = field(default_factory=list)
    """per group and member: last op completed, ops in flight"""
