"""The formats ``commlens import`` reads: each a module with ``detect`` and ``read``.

A format module defines ``NAME``, ``detect(path: Path) -> bool`` (does this
local file look like one of its files; cheap, reads the head only) and
``read(paths: list[Path], options: ImportOptions) -> ImportedRun``. A module
missing from this build makes its format "not available", nothing else.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Protocol, cast

from commlens.errors import UsageError
from commlens.importers.model import ImportedRun, SourceFile

FORMATS: dict[str, str] = {
    "kineto": "commlens.importers.kineto",
    "et": "commlens.importers.et",
    "fr": "commlens.importers.frrun",  # over the reader flight_recorder (commlens doctor's)
    "ds-log": "commlens.importers.deepspeed",
    "nccl-inspector": "commlens.importers.inspector",
}
"""Format name -> its module, in the order detection tries them."""


@dataclass
class ImportOptions:
    """What a reader is told besides its files."""

    sources: dict[Path, SourceFile] = field(default_factory=dict)
    """Local path -> the file as the user gave it (name, hash)."""
    world_size: int | None = None
    jobs: int = 1
    """Files read in parallel (processes), where the files are large enough to pay."""
    warn: Callable[[str], None] = print


class FormatModule(Protocol):
    NAME: str

    def detect(self, path: Path) -> bool: ...

    def read(self, paths: list[Path], options: ImportOptions) -> ImportedRun: ...


class NotAvailable(UsageError):
    """A format whose reader is not in this build."""


def format_module(name: str) -> FormatModule:
    """The reader of format ``name``; a one-line error when unknown or not built."""
    if name not in FORMATS:
        raise UsageError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}")
    try:
        module: ModuleType = importlib.import_module(FORMATS[name])
    except ModuleNotFoundError as exc:
        if exc.name != FORMATS[name]:
            raise
        raise NotAvailable(f"{name}: not available in this build") from None
    if not (hasattr(module, "detect") and hasattr(module, "read")):
        raise NotAvailable(f"{name}: not available in this build")
    if hasattr(module, "available") and not module.available():
        raise NotAvailable(f"{name}: not available in this build")
    return cast(FormatModule, module)


def available() -> list[str]:
    """The formats whose reader this build has."""
    out = []
    for name in FORMATS:
        try:
            format_module(name)
        except NotAvailable:
            continue
        out.append(name)
    return out


def detect_format(paths: list[Path]) -> str:
    """The one format all of ``paths`` are in; a one-line error otherwise.

    Execution traces beside Kineto traces are the Kineto import (sizes joined).
    """
    found: dict[str, list[Path]] = {}
    for path in paths:
        name = next((n for n in available() if format_module(n).detect(path)), None)
        if name is None:
            raise UsageError(
                f"{path}: not a trace of any format commlens reads ({', '.join(FORMATS)})"
            )
        found.setdefault(name, []).append(path)
    if set(found) == {"kineto", "et"}:
        return "kineto"
    if len(found) > 1:
        shown = "; ".join(f"{n}: {v[0].name}" for n, v in found.items())
        raise UsageError(f"the sources are of different formats ({shown}); import them apart")
    return next(iter(found))
