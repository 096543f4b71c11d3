"""dense_codes: right codes, and work bounded by the rows, not by the largest value."""

from __future__ import annotations

import tracemalloc

import numpy as np

from commlens.analysis.codes import dense_codes


def test_codes_of_small_and_large_values() -> None:
    for values in ([3, 1, 3, 0], [5, (1 << 21) + 7, 5], [-2, 9, -2]):
        v = np.array(values, np.int64)
        uniq, inverse = dense_codes(v)
        assert uniq.tolist() == sorted(set(values))
        assert uniq[inverse].tolist() == values


def test_a_few_rows_of_large_keys_cost_little() -> None:
    # a rank's keys mix in global codes (a process group's among thousands): counting
    # up to the largest key made each rank's pass grow with the run
    v = np.array([0, (1 << 21) + 1] * 50, np.int64)
    tracemalloc.start()
    try:
        dense_codes(v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes for 100 rows"
