"""Every run the README's tour reads (compare, validate, export, report) is one it makes."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_runs_read_are_runs_made() -> None:
    text = README.read_text()
    made = set(re.findall(r"--out (runs/[\w.-]+)", text))
    read = set()
    for command in re.findall(r"commlens (?:compare|validate|export|report) ([^`\n]+)", text):
        read |= set(re.findall(r"\b(runs/[\w.-]+)", command))
    assert read and read <= made, f"read but never made: {sorted(read - made)}"
