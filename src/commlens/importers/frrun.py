"""Flight Recorder dumps as a commlens run (``commlens import --format fr``).

The dumps are read by :mod:`commlens.importers.flight_recorder` (the reader
``commlens doctor`` uses: restricted unpickler, pickle and JSON, NCCL and gloo
versions, ``pg_config`` united over ranks); this module only turns what it
read into the common form and says what each field means. A build without
that reader says ``fr: not available in this build``. When the reader module
defines ``detect`` and ``read`` itself, they are used instead.

Each entry is an op: issue = ``time_created_ns`` (the CPU enqueue), end =
its start + ``duration_ms`` where the job ran with timing on, else unknown
(written as the issue time and said so); matched across ranks by its
group's sequence id; its state (scheduled, started, completed) counted in
the rank's metadata. A dump names no steps.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from commlens.errors import CommlensError, UsageError
from commlens.importers.clocks import align_ranks
from commlens.importers.groups import role_of
from commlens.importers.model import Group, ImportedRun, Op, Provenance, RankTrace, dtype_of
from commlens.importers.registry import ImportOptions, NotAvailable
from commlens.importers.sources import head
from commlens.optable import OPS, SIZE_IS_OUTPUT

NAME = "fr"
READER = "commlens.importers.flight_recorder"


def _reader() -> ModuleType:
    import importlib

    try:
        return importlib.import_module(READER)
    except ModuleNotFoundError as exc:
        if exc.name != READER:
            raise
        raise NotAvailable("fr: not available in this build") from None


def available() -> bool:
    """Whether this build has the Flight Recorder reader."""
    try:
        _reader()
    except NotAvailable:
        return False
    return True


def detect(path: Path) -> bool:
    try:
        fr = _reader()
    except NotAvailable:
        return False
    if hasattr(fr, "detect"):
        return bool(fr.detect(path))
    start = head(path, 4096)
    if not (start[:1] == b"\x80" or (b'"pg_config"' in start or b'"entries"' in start)):
        return False
    if fr.rank_of_name(path) is None:
        return False
    try:
        fr.load_dump(path)
    except CommlensError:
        return False
    return True


def read(paths: list[Path], options: ImportOptions) -> ImportedRun:
    fr = _reader()
    if hasattr(fr, "read"):
        run: ImportedRun = fr.read(paths, options)
        return run
    names = [p.name for p in paths]
    if len(set(names)) < len(names):
        raise UsageError("two dump files have the same name; give one folder of dumps")
    with tempfile.TemporaryDirectory(prefix="commlens-fr-") as tmp:
        for p in paths:  # one folder of the dumps as named, for the reader
            os.symlink(os.path.abspath(p), Path(tmp) / p.name)
        try:
            dumps = fr.read_dumps(Path(tmp))
        except CommlensError as exc:
            message = str(exc)
            for p in paths:  # the files as given, not their links in the scratch folder
                message = message.replace(str(Path(tmp) / p.name), str(p))
            raise UsageError(message.replace(tmp, "the dumps")) from None
        return _run(dumps, paths, options)


def _run(dumps: Any, paths: list[Path], options: ImportOptions) -> ImportedRun:
    world = options.world_size or dumps.world_size
    prov = Provenance(
        NAME,
        format_version=f"Flight Recorder {dumps.version}",
        files=[options.sources[p] for p in paths if p in options.sources],
    )
    run = ImportedRun(prov, world, backend=dumps.backend)
    for name, g in dumps.groups.items():
        run.groups[name] = Group(name, tuple(g.ranks), g.desc, role_of(g.desc or name))
    states: Counter[str] = Counter()
    others: Counter[str] = Counter()
    unknown_end = 0
    by_name = {p.name: p for p in paths}
    for rank, fr_rank in sorted(dumps.ranks.items()):
        shown = options.sources.get(by_name.get(fr_rank.path.name, fr_rank.path))
        trace = RankTrace(rank, files=[str(shown.path if shown else fr_rank.path)])
        rank_states: Counter[str] = Counter()
        for e in fr_rank.entries:
            if e.op not in OPS:
                others[e.profiling_name] += 1
                continue
            group = run.groups.get(e.group) or Group(e.group, ())
            dt = dtype_of(e.dtype)
            n_in = sum(_numel(s) for s in e.input_sizes)
            end = e.t_end_ns
            if end is None:
                unknown_end += 1
            op = Op(
                e.op,
                e.t_issue_ns,
                end if end is not None else e.t_issue_ns,
                t_wait_ns=0,
                pg_name=e.group,
                pg_ranks=group.ranks,
                group_size=len(group.ranks),
                role=group.role,
                dtype=dt[0] if dt else e.dtype.lower(),
                count=n_in,
                bytes_in=e.bytes_in,
                bytes_out=e.bytes_out,
                size_bytes=e.bytes_out if e.op in SIZE_IS_OUTPUT else e.bytes_in,
                peer=e.peer,
                api=e.profiling_name,
                group_seq=e.seq,
                end_known=end is not None,
            )
            if op.op == "barrier":
                op.size_bytes = 0
            trace.ops.append(op)
            rank_states[e.state] += 1
        trace.meta["fr_states"] = dict(rank_states)
        trace.meta["fr_version"] = fr_rank.version
        states.update(rank_states)
        run.ranks[rank] = trace
    run.warnings += list(dumps.warnings)
    prov.time_fields = {
        "clock": "each rank's wall clock (epoch ns); ranks aligned where ends are known",
        "t_issue_ns": "time_created_ns: when the CPU enqueued the op (not its start)",
        "t_end_ns": "its start + duration_ms where the job ran with timing on; otherwise "
        "unknown, written as the issue time",
        "t_wait_ns": "0: a dump says nothing of what the caller waited",
    }
    prov.notes.append("entry states: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    prov.missing.append("steps: a dump names none")
    for name, n in sorted(others.items()):
        prov.notes.append(f"{n} entries {name!r} left out (not a communication op commlens knows)")
    if unknown_end and unknown_end == sum(len(t.ops) for t in run.ranks.values()):
        prov.aggregate_only = True  # no op has a duration: none is shown as measured
        prov.times_note = (
            "no op's end is in the dumps; issue times (time_created_ns) are the dumps', "
            "durations are not known"
        )
    if unknown_end:
        prov.missing.append(
            f"{unknown_end} ops' ends (no timing in the dump, or never completed): written "
            "as their issue time"
        )
    prov.notes.append("a ring buffer: only each rank's newest entries (buffers wrap apart)")
    align_ranks(run)
    return run


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
