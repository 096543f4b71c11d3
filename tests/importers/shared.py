"""The real traces of ../shared/traces (relative to the project's root), for the importer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def trace(rel: str) -> Path:
    """A file or folder under ../shared/traces; the test is skipped when it is absent."""
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"{path} is not here (the shared traces are not laid out beside the project)")
    return path


def imported(src: Path, out: Path, *extra: str) -> Path:
    """``src`` imported at ``out`` (the command must succeed)."""
    from commlens.cli.main import main

    assert main(["import", str(src), "--out", str(out), *extra]) == 0
    return out
