"""The common in-memory form of an imported trace: what every format reader returns.

A reader keeps only communication: per rank its ops (:class:`Op`, one row of the
run format's events), its step windows, and what the run's manifest must say
about where the data came from (:class:`Provenance`). :mod:`.write` turns an
:class:`ImportedRun` into a run directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

# c10 scalar type names (as the profiler and execution traces write them) ->
# (commlens dtype name, bytes per element).
C10_DTYPES: dict[str, tuple[str, int]] = {
    "Float": ("float32", 4),
    "float": ("float32", 4),
    "Double": ("float64", 8),
    "double": ("float64", 8),
    "Half": ("float16", 2),
    "c10::Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "c10::BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8),
    "long int": ("int64", 8),
    "Int": ("int32", 4),
    "int": ("int32", 4),
    "Short": ("int16", 2),
    "short int": ("int16", 2),
    "Char": ("int8", 1),
    "signed char": ("int8", 1),
    "Byte": ("uint8", 1),
    "unsigned char": ("uint8", 1),
    "Bool": ("bool", 1),
    "bool": ("bool", 1),
    "Float8_e4m3fn": ("float8_e4m3fn", 1),
    "Float8_e5m2": ("float8_e5m2", 1),
    "Float8_e4m3fnuz": ("float8_e4m3fnuz", 1),
    "Float8_e5m2fnuz": ("float8_e5m2fnuz", 1),
    "ComplexFloat": ("complex64", 8),
    "ComplexDouble": ("complex128", 16),
}


def dtype_of(name: str) -> tuple[str, int] | None:
    """(commlens dtype name, element size) of a c10 or C type name; None if unknown."""
    name = name.strip()
    if name.startswith("Tensor(") and name.endswith(")"):
        name = name[7:-1]
    return C10_DTYPES.get(name)


@dataclass
class Op:
    """One communication op of one rank, in the run format's terms (its columns)."""

    op: str
    t_issue_ns: int
    t_end_ns: int
    t_wait_ns: int = 0
    pg_name: str = ""
    pg_ranks: tuple[int, ...] = ()
    group_size: int = 0
    role: str = ""
    dtype: str = ""
    count: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    size_bytes: int = 0
    peer: int | None = None
    is_async: bool = True
    step: int = -1
    phase: str = "other"
    module: str = ""
    api: str = ""
    device: str = ""
    """The device the op ran on (for the exposure), empty for a CPU op."""
    t_cpu_issue_ns: int | None = None
    """When the CPU issued an op timed by its device (the run's ``t_cpu_issue_ns``)."""
    stream: int | None = None
    """The device stream its kernel ran on (the run's ``stream``)."""
    end_known: bool = True
    """False when the source holds no end (``t_end_ns`` is then the issue time)."""
    group_seq: int | None = None
    """The op's sequence number in its group where the source numbers them (Flight
    Recorder's collective_seq_id, Inspector's coll_sn): the key that matches it
    across ranks; None: matched by its index in the group and step."""


@dataclass
class Group:
    """A process group as the source names it."""

    name: str
    ranks: tuple[int, ...]
    desc: str = ""
    role: str = ""
    backend: str = ""


@dataclass
class RankTrace:
    """What one rank's files hold."""

    rank: int
    host: str = ""
    pid: int | None = None
    files: list[str] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    """(step, start, end) in ns on the rank's clock."""
    meta: dict[str, Any] = field(default_factory=dict)
    kernels: pa.Table | None = None
    """The rank's device kernels and CPU syncs (:mod:`.kinetokernels`: an op's kernel
    names the op by its index in :attr:`ops`); None when not recorded."""


@dataclass
class SourceFile:
    """One input file as given (the name a user knows) and its hash."""

    path: str
    sha256: str
    bytes: int
    member: str = ""
    """The file inside an archive, when the source is one."""


@dataclass
class Provenance:
    """What the manifest says about where the run came from (``run.json`` ``import``)."""

    source_format: str
    format_version: str = ""
    files: list[SourceFile] = field(default_factory=list)
    time_fields: dict[str, str] = field(default_factory=dict)
    """Each time column of the run -> what it is in this source (clock; which end)."""
    estimated: list[str] = field(default_factory=list)
    """Values that are estimates, not measurements (one sentence each)."""
    missing: list[str] = field(default_factory=list)
    """What the source does not hold (one sentence each)."""
    notes: list[str] = field(default_factory=list)
    device_time: bool = False
    """True when op times are device (GPU kernel) times and ``t_wait_ns`` is the
    comm-kernel time not overlapped by compute kernels on the same device."""
    exposed: str = ""
    """What exposed time (``t_wait_ns``) is here, in a few words for a report's
    headline; empty: the caller blocked, as in a captured run."""
    times_note: str = ""
    """For a run whose times are not measurements: what of them is data, if any."""
    aggregate_only: bool = False
    """True when the events stand for aggregate counts (times synthetic)."""
    clock: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportedRun:
    """A whole imported job: its ranks, groups and provenance."""

    provenance: Provenance
    world_size: int
    backend: str = ""
    ranks: dict[int, RankTrace] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def missing_ranks(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.ranks]
