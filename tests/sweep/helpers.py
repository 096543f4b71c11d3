"""Shared by the sweep tests: a two-point grid that runs in a second."""

from __future__ import annotations

# nproc 3: dp runs (and is stopped by its 1 s timeout), tp is impossible (4 heads)
GRID = """
[sweep]
name = "t"
nproc = 3
steps = 2
timeout_s = 1
[grid]
model = ["gpt-tiny"]
scheme = ["dp", "tp"]
"""
