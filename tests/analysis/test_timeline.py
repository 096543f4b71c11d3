"""Time kernels against brute force on random intervals."""

from __future__ import annotations

import numpy as np
import pytest

from commlens.analysis.timeline import spread, step_rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_union_and_exposed_match_a_grid(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    step = np.sort(rng.integers(0, 5, n))
    s = step * 1000 + rng.integers(0, 900, n)
    e = s + rng.integers(0, 200, n)
    wait = rng.integers(0, 250, n)  # may exceed the duration: clipped to it
    got = step_rows(7, step, s, e, wait, np.ones(n, np.int64))
    blocked_from = e - np.minimum(wait, e - s)
    for i, st in enumerate(got["step"].tolist()):
        grid = np.zeros(6000, bool)
        exposed = np.zeros(6000, bool)
        for a, b, c in zip(s[step == st], e[step == st], blocked_from[step == st], strict=True):
            grid[a:b] = True
            exposed[c:b] = True
        assert got["comm_s"][i] == pytest.approx(grid.sum() / 1e9)
        assert got["exposed_s"][i] == pytest.approx(exposed.sum() / 1e9)
        assert got["ops"][i] == np.count_nonzero(step == st)
    assert (got["rank"] == 7).all()


def test_union_does_not_need_sorted_input() -> None:
    step = np.array([1, 0, 1, 0])
    s = np.array([150, 10, 100, 0])
    e = np.array([300, 50, 200, 20])
    got = step_rows(0, step, s, e, np.zeros(4, np.int64), np.ones(4, np.int64))
    assert got["step"].tolist() == [0, 1]
    assert got["comm_s"].tolist() == pytest.approx([50e-9, 200e-9])


def test_spread_conserves_bytes() -> None:
    rng = np.random.default_rng(3)
    s = rng.integers(0, 10_000, 500)
    e = s + rng.integers(0, 3_000, 500)
    wire = rng.random(500) * 1e6
    per_bin = spread(s, e, wire, 0, 250, 60)
    assert per_bin.sum() == pytest.approx(wire.sum())
    assert (per_bin >= 0).all()
