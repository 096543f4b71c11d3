from __future__ import annotations

import itertools

import pytest

from commlens.bench.sizes import format_size, parse_size, parse_sizes
from commlens.errors import UsageError


def test_parse_size_binary_units() -> None:
    assert parse_size("8") == 8
    assert parse_size("1K") == 1024
    assert parse_size("64M") == 64 << 20
    assert parse_size("2g") == 2 << 30
    assert parse_size("4KiB") == 4096


def test_range_doubles_and_includes_both_ends() -> None:
    sizes = parse_sizes("8:64M")
    assert sizes[0] == 8 and sizes[-1] == 64 << 20
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))
    assert len(sizes) == 24


def test_range_with_factor_and_list() -> None:
    assert parse_sizes("1K:1M:4") == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert parse_sizes("1M,1K,1K") == [1024, 1 << 20]


@pytest.mark.parametrize("text", ["", "64M:8", "1K:1M:1", "1K:1M:x", "big", "1:2:3:4", "0"])
def test_bad_sizes_are_one_line_errors(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_sizes(text)
    assert "\n" not in str(err.value)


def test_format_size() -> None:
    assert [format_size(s) for s in (8, 1024, 3 << 20, 1000)] == ["8", "1K", "3M", "1000"]
