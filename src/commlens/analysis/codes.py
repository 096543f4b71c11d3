"""Integer codes for strings and small integer tuples, shared by all ranks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Codes:
    """Strings of all ranks mapped to one set of integer codes."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.index: dict[str, int] = {}

    def code(self, value: str) -> int:
        if value not in self.index:
            self.index[value] = len(self.values)
            self.values.append(value)
        return self.index[value]

    def encode(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Codes of a string column (plain or dictionary-encoded; nulls are '')."""
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        out = [np.empty(0, np.int32)]
        for chunk in chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = pc.dictionary_encode(chunk)
            words = [v if v is not None else "" for v in chunk.dictionary.to_pylist()]
            lookup = np.array([self.code(v) for v in words] + [self.code("")], np.int32)
            null = len(words)  # null indices point at the '' code appended last
            indices = chunk.indices
            if indices.null_count:
                indices = pc.fill_null(indices, null)
            out.append(lookup[indices.to_numpy(zero_copy_only=False)])
        return np.concatenate(out)


DENSE_FLOOR = 1 << 16
"""Values below this (or below a few times the row count) are coded by counting."""


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each row's value among them), in O(n) without a
    sort when the values are small non-negative integers: below ``4 n`` or
    :data:`DENSE_FLOOR`, so that the counting never costs more than the rows (a key
    that grows with the run, such as a process group's code in a run of thousands of
    groups, would otherwise make each rank's pass grow with the run)."""
    limit = max(DENSE_FLOOR, 4 * values.size)
    if values.size and values.min() >= 0 and values.max() < limit:
        uniq = np.flatnonzero(np.bincount(values))
        lookup = np.zeros(int(values.max()) + 1, np.int64)
        lookup[uniq] = np.arange(uniq.size)
        return uniq, lookup[values]
    uniq, inverse = np.unique(values, return_inverse=True)
    return uniq, inverse.reshape(-1)


def first_index(inverse: np.ndarray, n: int) -> np.ndarray:
    """For each of ``n`` codes, the first row holding it (rows given by ``inverse``)."""
    first = np.full(n, inverse.size, np.int64)
    rows = np.arange(inverse.size)
    first[inverse[::-1]] = rows[::-1]  # with repeated indices the last write wins
    return first
