"""A rank's call-site files as a killed rank leaves them: cut short, missing, or planted."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from commlens.capture.callsites import CallSiteTable
from commlens.trace.callsites import RECORD, read_callsites
from commlens.trace.layout import callsites_paths


def _note_here(table: CallSiteTable, *seqs: int) -> int:
    """Note the caller's line as the site of ``seqs``; that line."""
    frame = sys._getframe(1)
    for seq in seqs:
        table.note(seq, frame)
    return frame.f_lineno


def test_written_in_two_checkpoints_read_by_seq(tmp_path: Path) -> None:
    table = CallSiteTable()
    line_a = _note_here(table, 0, 2)
    table.write(tmp_path, 3)
    line_b = _note_here(table, 1)
    table.write(tmp_path, 3)
    sites = read_callsites(tmp_path, 3).of(np.array([0, 1, 2, 7]))
    me = f"{__file__}:{{}} test_written_in_two_checkpoints_read_by_seq"
    assert sites == [me.format(line_a), me.format(line_b), me.format(line_a), ""]


def test_cut_short_by_a_kill(tmp_path: Path) -> None:
    table = CallSiteTable()
    line = _note_here(table, 5)
    table.write(tmp_path, 0)
    sites_file, records = callsites_paths(tmp_path, 0)
    with sites_file.open("a") as fh:
        fh.write('["half a line", 3')  # a site cut short: left out
    with records.open("ab") as fh:
        fh.write(RECORD.pack(6, 1)[:11])  # a record cut short: dropped
    got = read_callsites(tmp_path, 0)
    assert got.of(np.array([5, 6])) == [f"{__file__}:{line} test_cut_short_by_a_kill", ""]


def test_none_missing_or_a_link(tmp_path: Path) -> None:
    assert read_callsites(tmp_path, 0).of(np.array([0, 1])) == ["", ""]  # an imported run
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text('["/x.py", 1, "f"]\n')
    sites_file, records = callsites_paths(tmp_path, 1)
    sites_file.symlink_to(elsewhere)  # never followed
    records.write_bytes(RECORD.pack(0, 0))
    assert read_callsites(tmp_path, 1).of(np.array([0])) == [""]
