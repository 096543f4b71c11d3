"""The run manifest: ``run.json``, merged from per-rank ``rank-NNNNN.json``.

Each rank writes its own metadata file (atomically) when it starts and when it
finishes; the launcher adds what only it knows (command, exit codes). Every
writer re-merges ``run.json`` under a file lock, so whoever finishes last
leaves a complete manifest, and the reader re-merges anyway. The nodes of a
multi-node job each keep their facts in their own node file; merging and
reading combine them (:func:`commlens.trace.nodes.combine_nodes`).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import RunFormatError
from commlens.trace.layout import MANIFEST as MANIFEST  # re-exported for writers
from commlens.trace.layout import MANIFEST_LOCK, RANK_META_GLOB
from commlens.trace.layout import rank_meta_path as rank_meta_path  # re-exported
from commlens.trace.nodes import combine_nodes
from commlens.trace.schema import FORMAT_VERSION, MAX_TIME_NS, MAX_WORLD, STEP0_FROM_SEQ

FORMAT_NAME = "commlens-run"

# Environment variables that decide the transport (conventions §5).
TRANSPORT_ENV = (
    "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "NCCL_NET",
    "NCCL_IB_HCA",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "GLOO_SOCKET_IFNAME",
)


def write_json_atomic(path: Path, data: dict[str, Any], *, indent: int | None = 1) -> None:
    """Write ``data`` whole or not at all, inside ``path``'s run directory."""
    from commlens.safefile import write_output

    text = json.dumps(data, indent=indent, sort_keys=True, default=str)
    write_output(path, text, within=path.parent)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    from commlens.safefile import open_lock

    path = run_dir / MANIFEST_LOCK
    try:
        fd = open_lock(path)
    except OSError as exc:
        raise RunFormatError(f"{path}: cannot take the lock ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def base_manifest() -> dict[str, Any]:
    """Facts about this machine and software that every manifest carries."""
    from commlens.version import __version__

    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "commlens_version": __version__,
        "torch_version": torch_version(),
        "python_version": platform.python_version(),
        "created_unix_s": time.time(),
        "env": {k: os.environ[k] for k in TRANSPORT_ENV if k in os.environ},
    }


def torch_version() -> str | None:
    """The installed torch's version, without importing torch (seconds) when it is not loaded."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        return str(torch.__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object of a run directory (never through a symlink); a one-line error."""
    from commlens.safefile import META_LIMIT
    from commlens.safefile import read_json as read_file

    try:
        data = read_file(path, limit=META_LIMIT, follow=False)
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or text
        reason = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise RunFormatError(f"{path}: not a readable JSON file ({reason})") from None
    if not isinstance(data, dict):
        raise RunFormatError(f"{path}: expected a JSON object")
    return data


def merge_manifest(run_dir: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rebuild ``run.json`` from its current content, ``extra`` and the rank files."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        path = run_dir / MANIFEST
        manifest = read_json(path) if path.exists() else base_manifest()
        if manifest.get("format") != FORMAT_NAME:
            raise RunFormatError(f"{path}: not a commlens run manifest")
        if extra:
            _deep_update(manifest, extra)
        manifest["ranks"] = collect_rank_meta(run_dir)
        for meta in manifest["ranks"].values():
            for key in ("world_size", "backend"):
                if key in meta and key not in manifest:
                    manifest[key] = meta[key]
            if "workload" in meta and "workload" not in manifest:
                manifest["workload"] = meta["workload"]
        combine_nodes(run_dir, manifest, fill_topology=False)
        write_json_atomic(path, manifest)
        return manifest


def collect_rank_meta(run_dir: Path) -> dict[str, Any]:
    ranks: dict[str, Any] = {}
    for path in sorted(run_dir.glob(RANK_META_GLOB)):
        try:
            meta = read_json(path)
        except RunFormatError:
            continue
        if meta.get("format") == FORMAT_NAME + "-rank" and "rank" in meta:
            ranks[str(meta["rank"])] = meta
    return dict(sorted(ranks.items(), key=lambda kv: int(kv[0])))


def _deep_update(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value


# -- what the time columns mean -------------------------------------------------

TIME_SEMANTICS = "time_semantics"
"""The manifest key that says how a run's time columns are read; absent in a run
commlens captured (:data:`HOST_TIMES`)."""
HOST_TIMES = "host"
"""t_issue_ns: the call; t_end_ns: its completion; t_wait_ns: the caller blocked in it."""
DEVICE_TIMES = "device"
"""t_issue_ns/t_end_ns: the op's interval on its device (its GPU kernel's start and end
on its stream); t_wait_ns: the part of it not overlapped by compute kernels on that
device (its exposure), since a CPU does not wait on an NCCL kernel. An op without a
kernel keeps host times. From format 2 on the events also keep the CPU side:
``t_cpu_issue_ns`` (when the CPU issued the op) and ``stream`` (the kernel's stream),
:data:`commlens.trace.schema.DEVICE_COLUMNS`; a format-1 run has neither (null)."""
SYNTHETIC_TIMES = "synthetic"
"""Placeholders (an aggregate-only import): only counts and sizes are data."""
TIME_KINDS = (HOST_TIMES, DEVICE_TIMES, SYNTHETIC_TIMES)


def time_semantics(manifest: dict[str, Any]) -> str:
    """How the run's time columns are read: one of :data:`TIME_KINDS`."""
    value = manifest.get(TIME_SEMANTICS)
    return value if value in TIME_KINDS else HOST_TIMES


# -- reading: the manifest checked once, at the door ---------------------------

MAX_OFFSET_NS = 1 << 60
"""Clock offsets and drift are bounded so that moving a time in 0..MAX_TIME_NS
onto rank 0's clock stays within int64."""
MAX_DRIFT = 0.01
MAX_STEP = (1 << 31) - 1


@dataclass(frozen=True)
class Clock:
    """How to move a rank's times onto rank 0's clock: t + offset + drift·(t − t_ref)."""

    offset_ns: int
    drift: float
    t_ref_ns: int


@dataclass(frozen=True)
class StepWindow:
    step: int
    t_start_ns: int
    t_end_ns: int
    segment: str = ""
    """"setup" for the set-up window, "after last step" for the tail after the last
    optimizer step, else ""."""


@dataclass(frozen=True)
class RankInfo:
    """One rank's checked metadata."""

    rank: int
    status: str = "unknown"
    host: str = ""
    events: int | None = None
    clock: Clock | None = None
    steps: tuple[StepWindow, ...] = ()
    step0_from_seq: int | None = None
    """Events written as set-up (step -1) from this seq on are step 0's (a loop
    without forwards whose first step ended at an optimizer step or a mark)."""


@dataclass
class Manifest:
    """A run's manifest after :func:`read_manifest`: every value the readers use has
    its type and bounds checked."""

    world_size: int | None
    ranks: dict[int, RankInfo]
    data: dict[str, Any]
    """``run.json`` as read, with ``ranks`` replaced by the checked rank entries."""
    warnings: list[str] = field(default_factory=list)
    found: bool = False
    """True when the run has a ``run.json``."""


class _Bad(Exception):
    """A value out of type or bounds (the message says which)."""


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def bounds_text(lo: int, hi: int) -> str:
    """``lo..hi`` for a reader: powers of two as ``2^k``."""

    def one(n: int) -> str:
        m = abs(n)
        if m >= 1 << 32 and m & (m - 1) == 0:
            return f"{'-' if n < 0 else ''}2^{m.bit_length() - 1}"
        return str(n)

    return f"{one(lo)}..{one(hi)}"


def _int(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _Bad(f"{what} is {_show(value)}, not an integer in {bounds_text(lo, hi)}")
    return value


def _float(value: Any, bound: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= bound:
        raise _Bad(f"{what} is {_show(value)}, not a number within ±{bound}")
    return float(value)


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} is {_show(value)}, not a string")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{what} is {_show(value)}, not an object")
    return value


def _clock(value: Any) -> Clock | None:
    clock = _dict(value, "clock")
    if "offset_ns" not in clock:
        return None
    return Clock(
        _int(clock["offset_ns"], -MAX_OFFSET_NS, MAX_OFFSET_NS, "clock.offset_ns"),
        _float(clock.get("drift", 0.0), MAX_DRIFT, "clock.drift"),
        _int(clock.get("t_ref_ns", 0), 0, MAX_TIME_NS, "clock.t_ref_ns"),
    )


def _steps(value: Any) -> tuple[StepWindow, ...]:
    if not isinstance(value, list):
        raise _Bad(f"steps is {_show(value)}, not a list")
    out = []
    for i, item in enumerate(value):
        window = _good_window(item)
        if window is not None:
            out.append(window)
            continue
        step = _dict(item, f"steps[{i}]")
        out.append(
            StepWindow(
                _int(step.get("step"), -1, MAX_STEP, f"steps[{i}].step"),
                _int(step.get("t_start_ns"), 0, MAX_TIME_NS, f"steps[{i}].t_start_ns"),
                _int(step.get("t_end_ns"), 0, MAX_TIME_NS, f"steps[{i}].t_end_ns"),
                step["segment"] if isinstance(step.get("segment"), str) else "",
            )
        )
    return tuple(out)


def _good_window(item: Any) -> StepWindow | None:
    """``item`` as a step window when every field is good, else None (then
    :func:`_steps` checks it field by field, for the message): a run's metadata holds
    one per step per rank, so a clean one costs no message text."""
    if type(item) is not dict:
        return None
    step, start, end = item.get("step"), item.get("t_start_ns"), item.get("t_end_ns")
    if type(step) is not int or type(start) is not int or type(end) is not int:
        return None  # a bool is no integer here
    if not (-1 <= step <= MAX_STEP and 0 <= start <= MAX_TIME_NS and 0 <= end <= MAX_TIME_NS):
        return None
    segment = item.get("segment")
    return StepWindow(step, start, end, segment if isinstance(segment, str) else "")


# Optional fields of a rank's metadata: how each is checked. A null is absent.
_RANK_FIELDS: dict[str, Any] = {
    "status": lambda v: _str(v, "status"),
    "host": lambda v: _str(v, "host"),
    "events": lambda v: _int(v, 0, MAX_TIME_NS, "events"),
    "clock": _clock,
    "steps": _steps,
}


def check_rank_info(rank: int, meta: dict[str, Any]) -> tuple[RankInfo, dict[str, Any], list[str]]:
    """``rank``'s metadata checked field by field: a bad field is left out (its
    problem is returned), the rest kept. Also returns the entry without the bad fields."""
    checked: dict[str, Any] = {}
    problems: list[str] = []
    kept = dict(meta)
    for key, check in _RANK_FIELDS.items():
        if meta.get(key) is None:
            continue
        try:
            checked[key] = check(meta[key])
        except _Bad as exc:
            problems.append(str(exc))
            del kept[key]
    inner = meta.get("meta")
    if isinstance(inner, dict) and inner.get(STEP0_FROM_SEQ) is not None:
        try:
            checked["step0_from_seq"] = _int(inner[STEP0_FROM_SEQ], 0, MAX_TIME_NS, STEP0_FROM_SEQ)
        except _Bad as exc:
            problems.append(str(exc))
    if meta.get("world_size") is not None:
        try:
            _int(meta["world_size"], 1, MAX_WORLD, "world_size")
        except _Bad as exc:
            problems.append(str(exc))
            del kept["world_size"]
    return RankInfo(rank, **checked), kept, problems


def _rank_of(key: Any) -> int:
    """A rank number from a ``ranks`` key (a decimal string) or a ``rank`` value."""
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 7:
        key = int(key)
    return _int(key, 0, MAX_WORLD - 1, "rank")


def read_manifest(run_dir: Path) -> Manifest:
    """``run.json`` merged with the ranks' ``rank-NNNNN.json``, checked once.

    A bad ``run.json`` (unreadable, foreign, or a known key of the wrong type or out
    of bounds) is a one-line :class:`RunFormatError`. A bad rank entry costs only
    that rank's metadata, or the bad fields of it, with one warning per entry.
    """
    path = run_dir / MANIFEST
    warnings: list[str] = []
    found = os.path.lexists(path)
    data: dict[str, Any] = {}
    if found:
        if not path.is_file():
            raise RunFormatError(f"{path}: not a regular file")
        data = read_json(path)
        if data.get("format") != FORMAT_NAME:
            raise RunFormatError(f"{path}: not a commlens run manifest")
    try:
        world_size: int | None = None
        if "world_size" in data:
            world_size = _int(data["world_size"], 1, MAX_WORLD, "world_size")
        if "format_version" in data:
            _int(data["format_version"], 0, 1_000_000, "format_version")
        entries = _dict(data.get("ranks", {}), "ranks")
        for key in ("backend", "torch_version", "commlens_version"):
            if key in data:
                _str(data[key], key)
    except _Bad as exc:
        raise RunFormatError(f"{path}: {exc}") from None
    raw: dict[int, tuple[str, dict[str, Any]]] = {}
    for key, meta in entries.items():
        try:
            raw[_rank_of(key)] = (f"{MANIFEST} ranks[{_show(key)}]", _dict(meta, "the entry"))
        except _Bad as exc:
            warnings.append(f"{MANIFEST}: ranks[{_show(key)}] ignored ({exc})")
    for rank, where, meta in _rank_files(run_dir, warnings):
        raw[rank] = (where, meta)
    ranks: dict[int, RankInfo] = {}
    cleaned: dict[str, Any] = {}
    for rank in sorted(raw):
        where, meta = raw[rank]
        info, kept, problems = check_rank_info(rank, meta)
        if problems:
            warnings.append(f"{where}: {'; '.join(problems)}: ignored")
        if world_size is None and isinstance(kept.get("world_size"), int):
            world_size = kept["world_size"]
        ranks[rank] = info
        cleaned[str(rank)] = kept
    data = {**data, "ranks": cleaned}
    if world_size is not None:
        data["world_size"] = world_size
    combine_nodes(run_dir, data, fill_topology=True)
    return Manifest(world_size, ranks, data, warnings, found)


def _rank_files(run_dir: Path, warnings: list[str]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(rank, file name, content) of every readable ``rank-NNNNN.json``; the rank
    is the one the content names."""
    for path in sorted(run_dir.glob(RANK_META_GLOB)):
        if not path.is_file():
            warnings.append(f"{path.name} is not a regular file: ignored")
            continue
        try:
            meta = read_json(path)
            if meta.get("format") != FORMAT_NAME + "-rank":
                raise _Bad("not a commlens rank file")
            yield _rank_of(meta.get("rank")), path.name, meta
        except RunFormatError as exc:
            warnings.append(f"{path.name} is unreadable ({str(exc).split(': ', 1)[-1]}): ignored")
        except _Bad as exc:
            warnings.append(f"{path.name}: {exc}: ignored")
