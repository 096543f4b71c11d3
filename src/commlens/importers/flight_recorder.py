"""Read PyTorch Flight Recorder dumps: one file per rank, pickle or JSON.

A dump holds the rank's newest entries of its ring buffer (every op it
enqueued on a process group: group, sequence ids, op, sizes, dtypes, state,
times), the groups it belongs to (``pg_config``) and each group's progress
(``pg_status``: the last collective enqueued, started and completed, keyed by
the rank's own ``pg_id``). NCCL dumps (version 2.9 and on) and gloo dumps
(torch 2.13, version 2.10) are read alike. Pickles are read by an unpickler
that builds only dicts, lists, tuples, strings and numbers (no class is ever
looked up), so a foreign pickle is an error, never code run.

What each field means here: ``issue`` is ``time_created_ns`` (the CPU enqueue,
epoch ns); ``end`` is the start (``time_discovered_started_ns``) plus
``duration_ms`` where the job ran with timing on, else none. A dump names no
steps.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import RunFormatError
from commlens.importers.commops import canonical_op
from commlens.importers.model import dtype_of
from commlens.safefile import read_bytes

MAX_DUMP_BYTES = 1 << 30
"""Largest dump file read (a 2,000-entry dump with stacks is a few MB)."""
STATES = ("scheduled", "started", "completed")
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
_P2P = re.compile(r"^(send|recv)\s+(\d+)\s*(?:->|<-)\s*(\d+)$")


@dataclass(frozen=True)
class FrGroup:
    """A process group as the dumps describe it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class FrEntry:
    """One entry of a rank's ring buffer."""

    rank: int
    record_id: int
    group: str
    group_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    is_p2p: bool
    op: str
    """canonical op (commlens's op table); the dump's own name is ``profiling_name``"""
    profiling_name: str
    peer: int | None
    """global rank of a send's or recv's peer (None when the group's ranks are unknown)"""
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    dtype: str
    bytes_in: int
    bytes_out: int
    state: str
    retired: bool
    t_issue_ns: int
    t_start_ns: int | None
    t_end_ns: int | None
    frames: tuple[str, ...] = ()

    @property
    def seq(self) -> int:
        """The id entries of one group are matched on across ranks."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id


@dataclass(frozen=True)
class FrProgress:
    """A group's progress on one rank (``pg_status``): last collective seq ids."""

    enqueued: int
    started: int
    completed: int


@dataclass(frozen=True)
class FrRank:
    """One rank's dump."""

    rank: int
    path: Path
    version: str
    lib_version: str
    entries: tuple[FrEntry, ...]
    progress: dict[str, FrProgress]
    """by group name, where the dump lets its pg_id be named"""
    groups: tuple[str, ...]
    """the groups its pg_config lists"""


@dataclass
class FrDumps:
    """The dumps of one job, every rank's."""

    source: Path
    ranks: dict[int, FrRank]
    groups: dict[str, FrGroup]
    backend: str
    version: str
    world_size: int
    missing_ranks: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class _Restricted(pickle.Unpickler):
    """Builds only the built-in containers and scalars; any class is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refuses to load {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refuses persistent ids")


def load_dump(path: Path) -> dict[str, Any]:
    """One dump file as a dict (pickle through the restricted unpickler, or JSON)."""
    try:
        raw = read_bytes(path, limit=MAX_DUMP_BYTES)
    except OSError as exc:
        raise RunFormatError(f"cannot read {path}: {exc.strerror or exc}") from None
    data: Any
    if raw[:1] == b"\x80":
        try:
            data = _Restricted(io.BytesIO(raw)).load()
        except Exception as exc:
            raise RunFormatError(f"{path}: not a Flight Recorder dump ({exc})") from None
    elif raw.lstrip()[:1] == b"{":
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RunFormatError(f"{path}: not a Flight Recorder dump (bad JSON: {exc})") from None
    else:
        raise RunFormatError(f"{path}: not a Flight Recorder dump (neither pickle nor JSON)")
    if not isinstance(data, dict) or "version" not in data or "pg_config" not in data:
        raise RunFormatError(f"{path}: not a Flight Recorder dump (no version or pg_config)")
    return data


def rank_of_name(path: Path) -> int | None:
    """The rank a dump's file name ends in (``_dump_12``, ``rank_3``, ``rank_3.json``)."""
    match = _RANK_SUFFIX.search(path.name)
    return int(match.group(1)) if match else None


def dump_files(src: Path) -> list[Path]:
    """The dump files of ``src`` (a directory of them, or one file): files whose name ends
    in a rank; hidden files skipped."""
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise RunFormatError(f"{src}: no such file or directory")
    return [
        p
        for p in sorted(src.iterdir())
        if p.is_file() and not p.name.startswith(".") and rank_of_name(p) is not None
    ]


def _ranks_list(text: Any) -> tuple[int, ...]:
    if isinstance(text, list):
        return tuple(int(r) for r in text)
    try:
        values = json.loads(str(text))
    except ValueError:
        return ()
    return tuple(int(r) for r in values) if isinstance(values, list) else ()


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _time(value: Any) -> int | None:
    t = _int(value, 0)
    return t if t > 0 else None  # the JSON dump writes a missing time as 0


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(tuple(int(d) for d in s) for s in value if isinstance(s, list | tuple))


def _nbytes(sizes: tuple[tuple[int, ...], ...], dtypes: list[Any]) -> int:
    total = 0
    for i, shape in enumerate(sizes):
        n = 1
        for d in shape:
            n *= d
        dtype = str(dtypes[i]) if i < len(dtypes) else (str(dtypes[-1]) if dtypes else "")
        total += n * (dtype_of(dtype) or ("", 0))[1]
    return total


def _frames(value: Any) -> tuple[str, ...]:
    out = []
    for f in value or ():
        if isinstance(f, dict):
            out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '')}".strip())
    return tuple(out)


def _entry(rank: int, raw: dict[str, Any], groups: dict[str, FrGroup]) -> FrEntry:
    pg = raw.get("process_group") or ("", "")
    group, desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    pname = str(raw.get("profiling_name", ""))
    body = pname.split(":", 1)[1] if ":" in pname else pname
    peer = None
    p2p = _P2P.match(body.strip())
    name = p2p.group(1) if p2p else body.strip()
    if p2p:
        local = int(p2p.group(3))
        members = groups.get(group, FrGroup(group, desc, ())).ranks
        peer = members[local] if local < len(members) else None
    ins, outs = _sizes(raw.get("input_sizes")), _sizes(raw.get("output_sizes"))
    in_dt = list(raw.get("input_dtypes") or [])
    out_dt = list(raw.get("output_dtypes") or [])
    dtype = str(in_dt[0] if in_dt else (out_dt[0] if out_dt else ""))
    start = _time(raw.get("time_discovered_started_ns"))
    duration = raw.get("duration_ms")
    end = None
    if start is not None and isinstance(duration, int | float) and duration >= 0:
        end = start + int(duration * 1e6)
    state = str(raw.get("state", "scheduled"))
    return FrEntry(
        rank=rank,
        record_id=_int(raw.get("record_id")),
        group=group,
        group_desc=desc,
        collective_seq_id=_int(raw.get("collective_seq_id")),
        p2p_seq_id=_int(raw.get("p2p_seq_id")),
        is_p2p=bool(raw.get("is_p2p", False)) or p2p is not None,
        op=canonical_op(name) or name,
        profiling_name=pname,
        peer=peer,
        input_sizes=ins,
        output_sizes=outs,
        dtype=(dtype_of(dtype) or (dtype, 0))[0],
        bytes_in=_nbytes(ins, in_dt),
        bytes_out=_nbytes(outs, out_dt),
        state=state if state in STATES else "scheduled",
        retired=bool(raw.get("retired", False)),
        t_issue_ns=_int(raw.get("time_created_ns")),
        t_start_ns=start,
        t_end_ns=end,
        frames=_frames(raw.get("frames")),
    )


def _progress(
    data: dict[str, Any], entries: Iterable[dict[str, Any]], names: list[str]
) -> dict[str, FrProgress]:
    """``pg_status`` by group name: a pg_id is named by the entries that carry it, and
    the rest by creation order (pg_ids and numeric group names both grow as groups are
    made) when that order agrees with every pg_id the entries name."""
    status = data.get("pg_status")
    if not isinstance(status, dict):
        return {}
    by_id: dict[str, str] = {}
    for raw in entries:
        pg = raw.get("process_group") or ("",)
        by_id.setdefault(str(raw.get("pg_id")), str(pg[0]))
    ids = sorted(status, key=lambda k: _int(k, -1))
    numeric = [n for n in names if n.isdigit()]
    if len(numeric) == len(ids) == len(names):
        order = dict(zip(ids, sorted(numeric, key=int), strict=True))
        if all(order.get(i) == n for i, n in by_id.items()):
            by_id = order
    out: dict[str, FrProgress] = {}
    for pg_id, value in status.items():
        name = by_id.get(str(pg_id))
        if name is None or not isinstance(value, dict):
            continue
        out[name] = FrProgress(
            _int(value.get("last_enqueued_collective"), -1),
            _int(value.get("last_started_collective"), -1),
            _int(value.get("last_completed_collective"), -1),
        )
    return out


def read_dumps(src: Path | str) -> FrDumps:
    """Every rank's dump under ``src`` (a directory, or one file): :func:`read_files`."""
    src = Path(src)
    return read_files(dump_files(src), src)


def read_files(files: list[Path], src: Path) -> FrDumps:
    """The dumps ``files`` (one per rank) of the job at ``src``.

    Groups are the union of the ranks' ``pg_config``; a rank is taken from
    the file name. Dumps of two jobs (a group with two member lists, or two
    schema versions) are an error; ranks missing from the files are listed.
    """
    seen_ranks: dict[int, Path] = {}
    for path in files:
        rank = rank_of_name(path)
        if rank is None:
            raise RunFormatError(f"{path}: no rank at the end of its name (_dump_12, rank_3)")
        other = seen_ranks.get(rank)
        if other is not None:
            # A pickle and its JSON twin (rank_0, rank_0.json): the pickle is read.
            pair = sorted([other, path], key=lambda p: p.suffix == ".json")
            if pair[1].name != pair[0].name + ".json":
                raise RunFormatError(f"{src}: rank {rank} twice ({other.name}, {path.name})")
            path = pair[0]
        seen_ranks[rank] = path
    if not files:
        raise RunFormatError(f"{src}: no Flight Recorder dump (files named ..._<rank>)")
    loaded: list[tuple[int, Path, dict[str, Any]]] = []
    for rank, path in sorted(seen_ranks.items()):
        loaded.append((rank, path, load_dump(path)))
    groups: dict[str, FrGroup] = {}
    versions = {str(d.get("version")) for _, _, d in loaded}
    if len(versions) > 1:
        raise RunFormatError(f"{src}: dumps of two jobs (versions {', '.join(sorted(versions))})")
    for _, path, data in loaded:
        config = data.get("pg_config")
        if not isinstance(config, dict):
            raise RunFormatError(f"{path}: not a Flight Recorder dump (pg_config is not a map)")
        for key, value in config.items():
            if not isinstance(value, dict):
                continue
            name = str(value.get("name", key))
            members = _ranks_list(value.get("ranks", "[]"))
            if not name and not members:
                continue  # gloo's empty placeholder
            seen = groups.get(name)
            if seen is not None and seen.ranks != members:
                raise RunFormatError(
                    f"{src}: dumps of two jobs (group {name!r} has ranks {list(seen.ranks)} "
                    f"in one and {list(members)} in {path.name})"
                )
            groups[name] = FrGroup(name, str(value.get("desc", "")), members)
    ranks: dict[int, FrRank] = {}
    backends: set[str] = set()
    for rank, path, data in loaded:
        raw_entries = [e for e in data.get("entries") or [] if isinstance(e, dict)]
        for raw in raw_entries:  # groups the config does not list (gloo): named by entries
            pg = raw.get("process_group") or ("", "")
            if str(pg[0]) not in groups:
                groups[str(pg[0])] = FrGroup(str(pg[0]), str(pg[1]) if len(pg) > 1 else "", ())
        try:
            entries = tuple(_entry(rank, raw, groups) for raw in raw_entries)
        except (TypeError, ValueError, IndexError) as exc:
            raise RunFormatError(f"{path}: a damaged entry ({exc})") from None
        for raw in raw_entries:
            backends.add(str(raw.get("profiling_name", "")).split(":", 1)[0])
        config = data.get("pg_config") or {}
        names = [str(v.get("name", k)) for k, v in config.items() if isinstance(v, dict)]
        ranks[rank] = FrRank(
            rank=rank,
            path=path,
            version=str(data.get("version")),
            lib_version=str(data.get("nccl_version") or data.get("comm_lib_version") or ""),
            entries=tuple(sorted(entries, key=lambda e: (e.t_issue_ns, e.record_id))),
            progress=_progress(data, raw_entries, names),
            groups=tuple(n for n in names if n),
        )
    listed = {r for g in groups.values() for r in g.ranks}
    world = max([*listed, *ranks]) + 1
    missing = sorted(set(range(world)) - set(ranks))
    warnings = [f"no dump for rank(s) {', '.join(map(str, missing))}"] if missing else []
    backend = "/".join(sorted(b for b in backends if b)) or "unknown"
    return FrDumps(src, ranks, groups, backend, versions.pop(), world, missing, warnings)
