"""Evidence from what the user points at: a commlens run or a directory of dumps."""

from __future__ import annotations

from pathlib import Path

from commlens.doctor.model import Evidence
from commlens.errors import RunFormatError


def load_evidence(path: Path | str) -> Evidence:
    """A commlens run (has ``run.json`` or rank files), else Flight Recorder dumps."""
    path = Path(path)
    if not path.exists():
        raise RunFormatError(f"{path}: no such file or directory")
    from commlens.trace.layout import MANIFEST, RANK_META_GLOB

    if path.is_dir() and ((path / MANIFEST).exists() or any(path.glob(RANK_META_GLOB))):
        from commlens.doctor.from_run import evidence_from_run

        evidence = evidence_from_run(path)
    else:
        from commlens.doctor.from_fr import evidence_from_dumps
        from commlens.importers.flight_recorder import read_dumps

        evidence = evidence_from_dumps(read_dumps(path))
    if evidence.world_size < 2:
        raise RunFormatError(f"{path}: one rank only: doctor compares ranks, and there is one")
    return evidence
