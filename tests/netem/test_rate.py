from __future__ import annotations

import sys
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.netem import EmulatedCluster, iproute
from commlens.netem.rate import MAX_RATE_BITS, format_rate, parse_rate
from tests.netem.helpers import needs_netns


@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("1gbit", 1e9),
        ("500mbit", 5e8),
        ("2Gbit/s", 2e9),
        ("1.5gbit", 1.5e9),
        ("100kbit", 1e5),
        ("600gbit", 6e11),
    ],
)
def test_parse_rate(text: str, bits: float) -> None:
    assert parse_rate(text) == bits


@pytest.mark.parametrize(
    "text",
    [
        "fast",
        "1gb",
        "1 GB/s",
        "-1gbit",
        "10bit",
        "",
        "10gbps",
        "0gbit",
        "0.0mbit",
        "nan",
        "nangbit",
        "infgbit",
        "1e9bit",
        "601gbit",
        "1tbit",
        "99999999999999999999tbit",
        "9" * 400 + "gbit",
    ],
)
def test_parse_rate_rejects_with_one_line(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_rate(text)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_rates_above_the_bound_say_so() -> None:
    with pytest.raises(UsageError, match="above 600gbit"):
        parse_rate("99999999999999999999tbit")
    with pytest.raises(UsageError, match="positive"):
        parse_rate("0kbit")


@pytest.mark.parametrize(
    ("bits", "text"), [(1e9, "1gbit"), (2.5e8, "250mbit"), (1.5e9, "1500mbit")]
)
def test_format_rate_round_trips(bits: float, text: str) -> None:
    assert format_rate(bits) == text
    assert parse_rate(format_rate(bits)) == bits


@pytest.mark.root
@needs_netns
def test_the_fastest_rate_is_shaped_as_asked() -> None:
    """tc takes the bound with commlens's shaping and keeps the 50 ms queue (its limit
    32-bit)."""
    rate = MAX_RATE_BITS
    with EmulatedCluster(1, format_rate(rate)) as cluster:
        dev = ["dev", cluster.host_ifaces()[0]]
        queues = iproute.run(["tc", "qdisc", "show", *dev])
    assert "rate 600Gbit" in queues and "lat 50ms" in queues, queues
    limit = int(rate / 8 * 0.05) + int(rate / 8 * 0.004)
    assert f"parent 2:20 limit {limit}b" in queues, queues


@pytest.mark.parametrize("command", ["run", "trace"])
def test_a_bad_link_fails_before_the_out_directory_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    out = tmp_path / "out"
    link = ["--nodes", "2", "--link", "99999999999999999999tbit", "--out", str(out)]
    if command == "run":
        args = ["run", "--model", "gpt-tiny", "--scheme", "dp", *link]
    else:
        args = ["trace", "--nproc", "2", *link, "--", sys.executable, "-c", "pass"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"commlens {command}: error: link rate") and "\n" not in err, err
    assert not out.exists()
