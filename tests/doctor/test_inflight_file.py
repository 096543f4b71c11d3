"""The capture's side files of a rank are written only as commlens's own files."""

from __future__ import annotations

from pathlib import Path

from commlens.capture.inflight import StackDumps
from commlens.trace.layout import stacks_path


def test_a_planted_stacks_link_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("not commlens's\n")
    run = tmp_path / "run"
    run.mkdir()
    stacks_path(run, 0).symlink_to(victim)
    dumps = StackDumps()
    dumps.register(run, 0)
    assert dumps.file is None  # no stack dumps rather than a write through the link
    dumps.unregister()
    assert victim.read_text() == "not commlens's\n"
    assert stacks_path(run, 0).is_symlink()
