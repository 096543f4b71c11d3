from __future__ import annotations

import pytest

from commlens.errors import UsageError
from commlens.netem.rate import format_rate, parse_rate


@pytest.mark.parametrize(
    ("text", "bits"),
    [("1gbit", 1e9), ("500mbit", 5e8), ("2Gbit/s", 2e9), ("1.5gbit", 1.5e9), ("100kbit", 1e5)],
)
def test_parse_rate(text: str, bits: float) -> None:
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["fast", "1gb", "1 GB/s", "-1gbit", "10bit", "", "10gbps"])
def test_parse_rate_rejects_with_one_line(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_rate(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("bits", "text"), [(1e9, "1gbit"), (2.5e8, "250mbit"), (1.5e9, "1500mbit")]
)
def test_format_rate_round_trips(bits: float, text: str) -> None:
    assert format_rate(bits) == text
    assert parse_rate(format_rate(bits)) == bits
