"""``validate`` holds a traced run a rank at a time: its memory does not grow with the
number of ranks (generated runs of 8 and 32 ranks, the same events per rank)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.trace.synthetic import Spec, generate


def _peak(run: Path) -> int:
    tracemalloc.start()
    try:
        assert main(["validate", str(run), "--format", "json"]) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_of_validate_stays_with_a_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = Spec(tp=2, pp=1, steps=20, microbatches=2, layers=4, ranks_per_node=64)
    small, large = tmp_path / "r8", tmp_path / "r32"
    generate(small, Spec(**{**shape.__dict__, "dp": 4}))
    generate(large, Spec(**{**shape.__dict__, "dp": 16}))
    _peak(small)  # imports and caches first
    a, b = _peak(small), _peak(large)
    capsys.readouterr()
    # 4x the ranks and events: the rows of all ranks at once took 4x the memory
    assert b < 2 * a, f"8 ranks: {a:,} bytes at peak; 32 ranks: {b:,}"
