"""CPU terms fitted from a run's own op times, the networks ``whatif --net`` takes, kept steps."""

from __future__ import annotations

import numpy as np
import pytest

from commlens.errors import UsageError
from commlens.predict.profiles import NetworkProfile
from commlens.predict.topology import Fabric
from commlens.whatif.calibrate import fit_cpu_terms
from commlens.whatif.durations import measured, modelled
from commlens.whatif.model import build_program
from commlens.whatif.study import TBF_EFFICIENCY, kept_steps, network_profile, network_profiles
from tests.whatif.synthetic import Ev, make_trace

WIRE = NetworkProfile("wire", latency_s=0.0, bandwidth_Gbps=8e-3, efficiency=1.0)
"""1 MB/s: an all-reduce of S bytes between two ranks on two nodes lasts S us."""


def two_rank_run(service: dict[int, float]) -> list[Ev]:
    """Blocking all-reduces of each size (bytes) lasting ``service[size]`` us, rank 1 ending
    1 us after rank 0, one step each."""
    events, t = [], 0.0
    for step, (size, dur) in enumerate(service.items()):
        events += [
            Ev(0, "all_reduce", t, t + dur, size=size, step=step),
            Ev(1, "all_reduce", t, t + dur + 1, size=size, step=step),
        ]
        t += dur + 10
    return events


def test_the_fit_charges_the_rest_to_alpha_and_beta_and_keeps_rank_lags() -> None:
    # measured = wire (S us) + 50 us + 0.5 us per byte, rank 1 one us later
    sizes = {100: 100 + 50 + 50.0, 200: 200 + 50 + 100.0, 400: 400 + 50 + 200.0}
    trace = make_trace(two_rank_run(sizes), [(r, s, 0, 2000) for r in (0, 1) for s in range(3)])
    prog = build_program(trace)
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    own = modelled(prog, fabric)
    cal = fit_cpu_terms(prog, fabric, measured(prog), own, [0, 1, 2])
    (term,) = cal.terms
    assert (term.op, term.role, term.nodes, term.calls) == ("all_reduce", "dp", 2, 6)
    assert term.alpha_s == pytest.approx(50.5e-6, rel=1e-6)  # the mean of the two ranks
    assert term.beta_s_per_byte == pytest.approx(0.5e-6, rel=1e-6)
    # own model + the fitted terms give back every measured time, rank lag included
    assert own + cal.extra_s == pytest.approx(measured(prog), abs=1e-9)


def test_a_cpu_term_is_never_negative() -> None:
    # the model over-explains: measured is half the wire time
    trace = make_trace(two_rank_run({100: 50.0, 400: 200.0}), [(0, 0, 0, 900), (1, 0, 0, 900)])
    prog = build_program(trace)
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    cal = fit_cpu_terms(prog, fabric, measured(prog), modelled(prog, fabric), [0, 1])
    (term,) = cal.terms
    assert term.alpha_s >= 0 and term.beta_s_per_byte >= 0


def test_networks_are_profiles_rates_or_unshaped() -> None:
    slow = network_profile("200mbit")
    assert slow.bandwidth_Gbps == pytest.approx(0.2) and slow.efficiency == TBF_EFFICIENCY
    assert network_profile("unshaped").name == "unshaped"
    assert [p.name for p in network_profiles("tcp-10g, 1gbit")] == ["tcp-10g", "1gbit"]
    with pytest.raises(UsageError, match="bad link rate"):
        network_profile("5 parsecs")
    with pytest.raises(UsageError, match="unknown network profile 'warp-drive'"):
        network_profiles("warp-drive")
    assert np.isfinite(network_profile("1gbit").effective_Gbps)


def test_the_set_up_window_and_the_first_step_are_left_out() -> None:
    events = [
        Ev(r, "all_reduce", 10 * s + 1, 10 * s + 2, step=s) for r in (0, 1) for s in (-1, 0, 1, 2)
    ]
    windows = [(r, s, 10 * s, 10 * s + 9) for r in (0, 1) for s in (-1, 0, 1, 2)]
    assert kept_steps(make_trace(events, windows), None) == [1, 2]
