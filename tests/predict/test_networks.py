"""The one network grammar: predict, whatif and sweep read a spec alike."""

from __future__ import annotations

import json

import pytest

import commlens.sweep.check as sweep_check
import commlens.whatif.study as study
from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.netem.cluster import SHAPED_EFFICIENCY, burst_bytes
from commlens.predict.networks import link_burst, network_profile, network_profiles
from commlens.predict.profiles import get_profile


def test_a_rate_is_an_emulated_link_of_that_rate() -> None:
    link = network_profile("200mbit")
    assert link.bandwidth_Gbps == pytest.approx(0.2)
    assert link.efficiency == SHAPED_EFFICIENCY == 0.97
    assert link.latency_s == get_profile("loopback").latency_s
    assert link_burst(link) == burst_bytes(200e6)
    named = network_profile("200mbit", label="emulated-200mbit")
    assert (named.latency_s, named.effective_Gbps) == (link.latency_s, link.effective_Gbps)
    assert network_profile("unshaped").bandwidth_Gbps == get_profile("loopback").bandwidth_Gbps
    assert [p.name for p in network_profiles("tcp-10g, 1gbit,unshaped")] == [
        "tcp-10g",
        "1gbit",
        "unshaped",
    ]
    with pytest.raises(UsageError):
        network_profile("5 parsecs")


def test_whatif_and_sweep_read_networks_by_the_one_grammar() -> None:
    assert study.network_profile is network_profile and study.network_profiles is network_profiles
    assert sweep_check.network_profile is network_profile
    for stale in ("EMULATED_LATENCY_S", "EMULATED_EFFICIENCY", "link_profile"):
        assert not hasattr(sweep_check, stale)
    assert not hasattr(study, "SHAPED_EFFICIENCY")


def test_predict_takes_a_rate_and_unshaped(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "gpt-125m", "--scheme", "dp", "--dp", "2", "--format", "json"]
    assert main([*args, "--net", "200mbit,unshaped,tcp-10g"]) == 0
    nets = json.loads(capsys.readouterr().out)["networks"]
    assert [n["name"] for n in nets] == ["200mbit", "unshaped", "tcp-10g"]
    # a slower link takes longer to move the same gradients
    assert nets[0]["comm_time_s"] > nets[2]["comm_time_s"]
