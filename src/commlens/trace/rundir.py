"""Prepare an output directory for a run, replacing only what commlens wrote.

``--force`` replaces a directory only when it is recognisably a commlens run
(its ``run.json`` parses and names the commlens run format), and then deletes
only commlens's own files in it: the manifest and its lock, the rank event
and metadata files, the ranks' parts directories, the NIC counters and the
temporary files of these. Anything else in it is a foreign file: the
directory is left as it is and the error names that file. A sweep (see
:func:`commlens.sweep.catalog.clear_sweep`) uses the same rule for its own
files.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from commlens.errors import UsageError
from commlens.trace.layout import MANIFEST, OWN_DIRS, OWN_FILES, PART_FILES, manifest_probe
from commlens.trace.manifest import FORMAT_NAME

Checker = Callable[[Path], Path | None]
"""Given an entry: None when it is commlens's own, else the foreign path (it or one inside)."""


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a ``run.json`` that says it is a commlens run."""
    try:
        data = json.loads((path / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT_NAME


def foreign_in_run(entry: Path) -> Path | None:
    """None when ``entry`` (in a run directory) is one of commlens's own files."""
    if entry.is_symlink():
        return entry
    if entry.is_dir():
        if not OWN_DIRS.match(entry.name):
            return entry
        for f in sorted(entry.iterdir()):
            if f.is_symlink() or not f.is_file() or not PART_FILES.match(f.name):
                return f
        return None
    return None if entry.is_file() and OWN_FILES.match(entry.name) else entry


def first_foreign(path: Path, check: Checker) -> Path | None:
    """The first entry under ``path`` that ``check`` does not recognise."""
    try:
        for entry in sorted(path.iterdir()):
            if (bad := check(entry)) is not None:
                return bad
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return None


def remove_entries(path: Path, check: Checker) -> None:
    """Delete every entry of ``path``, after checking that all are commlens's own."""
    bad = first_foreign(path, check)
    if bad is not None:
        raise UsageError(
            f"{path}: holds {str(bad.relative_to(path))!r}, which commlens did not write; "
            "refusing to replace it (move it away or pick another directory)"
        )
    try:
        for entry in sorted(path.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except OSError as exc:
        raise UsageError(f"{path}: cannot remove the old run ({exc.strerror or exc})") from None


def clear_run(path: Path, *, require_manifest: bool = True) -> None:
    """Empty the run directory ``path`` of commlens's files; refuse if it holds others.

    ``require_manifest=False`` is for a run directory inside commlens's own
    sweep directory, which an interrupted start may leave without ``run.json``.
    """
    if require_manifest and not is_run_dir(path):
        raise UsageError(
            f"{path} is not a commlens run (no valid {MANIFEST}); refusing to replace it"
        )
    remove_entries(path, foreign_in_run)


def prepare_run_dir(out: Path, force: bool, flag: str = "--out") -> Path:
    """Make ``out`` an empty directory for a new run.

    An empty or missing directory is used as it is; a commlens run there is
    replaced with ``force`` (its own files only); anything else is refused.
    Every refusal is a one-line :class:`UsageError`.
    """
    if out.is_symlink() and not out.is_dir():
        raise UsageError(f"{flag} {out} is a symlink to no directory; pick another directory")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {out} exists and is not a directory; pick a directory")
    first = first_foreign(out, lambda e: e) if out.is_dir() else None
    if first is not None:
        if not is_run_dir(out):
            raise UsageError(
                f"{flag} {out} already exists and is not a commlens run (it holds "
                f"{first.name}); choose a new directory"
            )
        if not force:
            raise UsageError(f"{flag} {out} already holds a run; pass --force to replace it")
        clear_run(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = manifest_probe(out, os.getpid())
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot write there ({exc.strerror or exc})") from None
    return out
