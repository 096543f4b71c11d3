"""CPU terms fitted from a run's own op times, the networks ``whatif --net`` takes, kept steps."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from commlens.errors import UsageError
from commlens.netem.cluster import SHAPED_EFFICIENCY
from commlens.predict.networks import network_profile, network_profiles
from commlens.predict.profiles import NetworkProfile, OpOverride, get_profile
from commlens.predict.topology import Fabric
from commlens.whatif.backend import GLOO_REPLAY
from commlens.whatif.calibrate import fit_cpu_terms, fit_steps
from commlens.whatif.costing import Steps, modelled, stepped_time, unoverlapped
from commlens.whatif.durations import measured
from commlens.whatif.model import Program, build_program
from commlens.whatif.study import kept_steps, recorded_burst
from tests.whatif.synthetic import Ev, make_trace, repeated_ops

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


def test_each_member_keeps_its_lag_in_its_own_call() -> None:
    # the late member alternates: rank 1 40 us late in even steps, rank 0 in odd ones
    events, t = [], 0.0
    for step in range(4):
        late = [0.0, 40.0] if step % 2 == 0 else [40.0, 0.0]
        events += [Ev(r, "all_reduce", t, t + 300 + late[r], size=200, step=step) for r in (0, 1)]
        t += 400
    trace = make_trace(events, [(r, s, 0, 1600) for r in (0, 1) for s in range(4)])
    prog = build_program(trace)
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    own = modelled(prog, fabric)
    cal = fit_cpu_terms(prog, fabric, measured(prog), own, [0, 1, 2, 3])
    # each rank's mean lag (20 us each) would end both members together in every call,
    # where the capture had one of them 40 us late
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
    assert slow.bandwidth_Gbps == pytest.approx(0.2) and slow.efficiency == SHAPED_EFFICIENCY
    assert network_profile("unshaped").name == "unshaped"
    assert [p.name for p in network_profiles("tcp-10g, 1gbit")] == ["tcp-10g", "1gbit"]
    with pytest.raises(UsageError, match="bad link rate"):
        network_profile("5 parsecs")
    with pytest.raises(UsageError, match="unknown network profile 'warp-drive'"):
        network_profiles("warp-drive")
    assert np.isfinite(network_profile("1gbit").effective_Gbps)


def test_the_bucket_of_the_own_link_is_read_from_the_manifest() -> None:
    trace = make_trace(
        [Ev(0, "all_reduce", 0.0, 1.0), Ev(1, "all_reduce", 0.0, 1.0)], [(0, 0, 0.0, 2.0)]
    )
    assert recorded_burst(trace) == 0.0
    for key in ("burst_bytes", "tbf_burst_bytes"):  # tbf-shaped runs recorded the latter
        trace.manifest = {"topology": {key: 25_000}}
        assert recorded_burst(trace) == 25_000.0
    trace.manifest = {"topology": {"burst_bytes": None}}
    assert recorded_burst(trace) == 0.0


def test_the_set_up_window_and_the_first_step_are_left_out() -> None:
    events = [
        Ev(r, "all_reduce", 10 * s + 1, 10 * s + 2, step=s) for r in (0, 1) for s in (-1, 0, 1, 2)
    ]
    windows = [(r, s, 10 * s, 10 * s + 9) for r in (0, 1) for s in (-1, 0, 1, 2)]
    assert kept_steps(make_trace(events, windows), None) == [1, 2]


def test_the_host_and_the_wire_of_an_op_overlap_but_for_one_step() -> None:
    # ring all-reduce of 4 ranks: 6 steps of S/4 bytes each; WIRE moves 1 byte per us
    def ring(size: float, latency: float, burst: float = 0.0, link: NetworkProfile = WIRE) -> float:
        return stepped_time("all_reduce", size, 4, link, 1, "ring", latency, burst)

    assert ring(400, 0.0) == pytest.approx(600e-6)  # 2(n-1)/n x S bytes
    # host-bound: 6 steps of 1 ms on the host, and one step's 100 us of wire beside none
    assert ring(400, 1e-3) == pytest.approx(6.1e-3)
    # wire-bound: the 600 us of wire, and one step's 50 us on the host
    assert ring(400, 50e-6) == pytest.approx(650e-6)
    # a tbf bucket of 150 bytes lets the first one and a half steps through at the rate
    # of the link under the shaper (the veth pair: loopback's)
    veth = 150 * get_profile("loopback").beta("all_reduce")
    assert ring(400, 0.0, burst=150) == pytest.approx(450e-6 + veth)
    assert ring(400, 20e-6, burst=150) == pytest.approx(470e-6 + veth)  # and a step's 20
    # a profile fitted on a host (its alpha holds the host's latency): the longer one counts
    fitted = replace(WIRE, ops={"all_reduce": OpOverride(alpha_s=30e-6)})
    assert ring(400, 20e-6, link=fitted) == pytest.approx(780e-6)  # 6 x 30 of alpha and the wire
    # the step latency's 20 us beyond the alpha: 6 x 20 on the host, one of them beside the wire
    assert ring(400, 50e-6, link=fitted) == pytest.approx(800e-6)


def replayed_on(prog: Program, own: Fabric, other: Fabric) -> np.ndarray:
    """Each event's op time on ``other`` as ``whatif --op-times fit`` finds it for a gloo run
    captured on ``own``: the step latency, then the CPU terms, fitted against ``own``."""
    keep = sorted(set(prog.trace.step.tolist()))[1:]
    took = measured(prog)
    wire = modelled(prog, own, None, GLOO_REPLAY)
    steps = fit_steps(prog, own, took, wire, keep, burst_bytes=0.0)
    cal = fit_cpu_terms(prog, own, took, modelled(prog, own, None, GLOO_REPLAY, steps), keep, steps)
    return modelled(prog, other, None, GLOO_REPLAY, steps) + cal.extra_s


@pytest.mark.parametrize("captured_on", [1.0, 10.0])
def test_an_op_hides_its_host_under_the_wire_or_its_wire_under_the_host(
    captured_on: float,
) -> None:
    # 2 ranks on 2 nodes, 500-byte all-reduces: 2 steps, each 1 ms on the host and 250 us
    # on WIRE (host-bound: the op lasts its 2 ms of host and one step's wire beside none);
    # captured on WIRE or on a link 10x faster, then replayed on WIRE, 10x slower and 10x
    # faster: host-bound, an op moves by one step's change of wire; wire-bound (10x
    # slower: 5 ms of wire), it lasts the wire and one step's 1 ms of host
    def link(times_wire: float) -> Fabric:
        profile = replace(WIRE, bandwidth_Gbps=WIRE.bandwidth_Gbps * times_wire)
        return Fabric(inter=profile, intra=profile, gpus_per_node=1)

    events, windows = repeated_ops("all_reduce", 500, 2000 + 250 / captured_on, steps=4, lag_us=0)
    prog = build_program(make_trace(events, windows))
    for times_wire, lasts in ((1.0, 2250e-6), (10.0, 2025e-6), (0.1, 6000e-6)):
        got = replayed_on(prog, link(captured_on), link(times_wire))
        assert got == pytest.approx(lasts, rel=1e-6)


def two_sizes(small_us: float, large_us: float, large: int = 5000) -> Program:
    """2 ranks on 2 nodes, per step a 16-byte all-reduce of ``small_us`` and a ``large``-byte
    one of ``large_us`` (each rank alike)."""
    events, t = [], 0.0
    for step in range(4):
        for size, dur in ((16, small_us), (large, large_us)):
            events += [Ev(r, "all_reduce", t, t + dur, size=size, step=step) for r in (0, 1)]
            t += dur + 10
    step_us = t / 4
    windows = [(r, s, step_us * s, step_us * (s + 1)) for r in (0, 1) for s in range(4)]
    return build_program(make_trace(events, windows))


def test_a_kinds_slow_calls_alone_do_not_make_it_latency_bound() -> None:
    # 500-byte all-reduces take 700 us (500 of them on the wire) but one in four 2 ms:
    # picked call by call, the slow ones alone would set the step latency
    events, t = [], 0.0
    for step in range(4):
        dur = 2000.0 if step == 2 else 700.0
        events += [Ev(r, "all_reduce", t, t + dur, size=500, step=step) for r in (0, 1)]
        t += 2010
    windows = [(r, s, 2010 * s, 2010 * s + 2010) for r in (0, 1) for s in range(4)]
    prog = build_program(make_trace(events, windows))
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    wire = modelled(prog, fabric, None, GLOO_REPLAY)
    fit = fit_steps(prog, fabric, measured(prog), wire, [1, 2, 3], burst_bytes=0.0)
    assert fit.latency_s == {} and fit.default_latency_s == 0.0


def test_what_a_wire_bound_op_took_beyond_the_model_shrinks_with_its_host_time() -> None:
    # 16-byte all-reduces of 500 us set the step latency: (500 - 16/2) / 2 = 246 us, so
    # a 5000-byte one's host is 492 us beside its 5000 us of wire, and the model says
    # 5246 us; it took 5500. The 254 us more did not overlap: on a link 10x faster its
    # host is the longer of the two and the 254 us stay; 100x faster, its wire is 50 us,
    # a tenth of the host it ran beside, and so are they; 10x slower, they stay as well
    prog = two_sizes(500.0, 5500.0)
    own = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    keep = [1, 2, 3]
    took = measured(prog)
    steps = fit_steps(
        prog, own, took, modelled(prog, own, None, GLOO_REPLAY), keep, burst_bytes=0.0
    )
    assert steps.default_latency_s == pytest.approx(246e-6)
    own_s = modelled(prog, own, None, GLOO_REPLAY, steps)

    def shorter(events: np.ndarray) -> np.ndarray:
        return unoverlapped(prog, own, None, GLOO_REPLAY, steps, events)

    cal = fit_cpu_terms(prog, own, took, own_s, keep, steps, own_shorter=shorter)
    assert cal.unhidden is not None
    large = prog.inst_size[prog.inst] == 5000
    expected = {1.0: 5500e-6, 10.0: 746e-6 + 254e-6, 100.0: 517e-6 + 25.4e-6, 0.1: 50500e-6}
    for times_wire, lasts in expected.items():
        link = replace(WIRE, bandwidth_Gbps=WIRE.bandwidth_Gbps * times_wire)
        other = Fabric(inter=link, intra=link, gpus_per_node=1)
        got = modelled(prog, other, None, GLOO_REPLAY, steps)
        shorter = unoverlapped(prog, other, None, GLOO_REPLAY, steps, cal.unhidden[0])
        cal.add_to(got, None, shorter)
        assert got[large] == pytest.approx(lasts, rel=2e-3), times_wire


def test_gloo_reduce_scatter_costs_an_all_reduce_and_a_send_its_host_work() -> None:
    events = [Ev(r, "reduce_scatter", 0, 900, size=400) for r in (0, 1)]
    events += [
        Ev(0, "send", 1000, 1001, peer=1, size=400, group="p", members=(0, 1)),
        Ev(1, "recv", 1000, 1500, peer=0, size=400, group="p", members=(0, 1)),
    ]
    prog = build_program(make_trace(events, [(0, 0, 0, 2000), (1, 0, 0, 2000)]))
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    steps = Steps(default_latency_s=5e-6)
    times = dict(
        zip(
            prog.trace.op[prog.members].tolist(),
            modelled(prog, fabric, None, GLOO_REPLAY, steps)[prog.members],
            strict=True,
        )
    )
    names = prog.trace.op_names
    # 2 x (n-1)/n x S on the wire, and one of its 2 steps of 5 us beside none of it
    assert times[names.index("reduce_scatter")] == pytest.approx(405e-6)
    # a send ends once its bytes are in the socket: its step, not the wire
    assert times[names.index("send")] == pytest.approx(5e-6)
    assert times[names.index("recv")] == pytest.approx(405e-6)  # the wire, then 5 us
    assert modelled(prog, fabric)[0] == pytest.approx(200e-6)  # not gloo: its own formula


def test_step_latency_comes_from_the_latency_bound_ops() -> None:
    # 16-byte all-reduces take 3 ms (2 steps, 16 us of them on the wire); 1000-byte ones
    # take about their wire time: their latency is hidden and they get the small ones'
    events, t = [], 0.0
    for step in range(3):
        for size, dur in ((16, 3000.0), (1000, 1100.0)):
            events += [Ev(r, "all_reduce", t, t + dur, size=size, step=step) for r in (0, 1)]
            t += dur + 10
    windows = [(r, s, 4120 * s, 4120 * s + 4120) for r in (0, 1) for s in range(3)]
    prog = build_program(make_trace(events, windows))
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    wire = modelled(prog, fabric, None, GLOO_REPLAY)
    fit = fit_steps(prog, fabric, measured(prog), wire, [1, 2], burst_bytes=0.0)
    # the 16-byte ones, less one of their 2 steps' 8 us on the wire: 2 steps of 1.496 ms
    assert fit.latency_s == {("all_reduce", "dp", 2): pytest.approx(1.496e-3)}
    assert fit.default_latency_s == pytest.approx(1.496e-3)


def a_message_a_step(took_us: float, size: int) -> Program:
    """2 ranks, one ``size``-byte message from 0 to 1 in each of 4 steps, its send and its
    receive each taking ``took_us``."""
    events = []
    for step in range(4):
        t = step * 2000.0
        events += [
            Ev(0, "send", t, t + took_us, size=size, peer=1, role="pp", step=step),
            Ev(1, "recv", t, t + took_us, size=size, peer=0, role="pp", step=step),
        ]
    return build_program(make_trace(events, [(r, s, 0, 8000) for r in (0, 1) for s in range(4)]))


def test_a_message_the_own_link_over_explains_keeps_that_as_a_share_of_its_wire() -> None:
    # 2 ranks on 2 nodes, a 1000-byte message per step: the model says 1000 us on WIRE,
    # it took 500. The 500 us the model has too many are the wire model's (the shared
    # rate of a node's link): on a link 10x faster the message takes half its 100 us of
    # wire, not 100 - 500 us (nothing, its host latency cancelled with it)
    prog = a_message_a_step(took_us=500, size=1000)
    own = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    fast = replace(WIRE, bandwidth_Gbps=WIRE.bandwidth_Gbps * 10)
    other = Fabric(inter=fast, intra=fast, gpus_per_node=1)
    own_s, other_s = (
        modelled(prog, own, None, GLOO_REPLAY),
        modelled(prog, other, None, GLOO_REPLAY),
    )
    recvs = prog.recv_of[prog.inst] == np.arange(prog.inst.size)
    assert own_s[recvs] == pytest.approx(1000e-6) and other_s[recvs] == pytest.approx(100e-6)
    assert (own_s[~recvs] == 0).all()  # a send: its bytes into the socket
    wire = np.where(recvs, own_s, 1000e-6)  # the pair's wire time, for both its ends
    cal = fit_cpu_terms(prog, own, measured(prog), own_s, [1, 2, 3], own_wire_s=wire)
    assert cal.wire_share is not None
    assert cal.wire_share[recvs] == pytest.approx(0.5) and (cal.wire_share[~recvs] == 0).all()
    assert cal.extra_s[recvs] == pytest.approx(0.0)
    cal.add_to(own_s, wire)
    assert own_s == pytest.approx(measured(prog), abs=1e-9)  # the own link: as measured
    cal.add_to(other_s, wire / 10)
    assert other_s[recvs] == pytest.approx(50e-6)


def test_an_excess_equal_to_its_wire_time_is_a_share_whatever_its_last_bits() -> None:
    # the model says 1000 us, it took 500: the 500 too many are exactly the wire time,
    # here one float step below them (the rounding of the means they are found with, which
    # a chunk of the run's steps and the whole run round differently). Within the wire:
    # the whole wire's share, on a 10x slower link too (5000 us less, not 500)
    prog = a_message_a_step(took_us=500, size=1000)
    own = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    own_s = modelled(prog, own, None, GLOO_REPLAY)
    recvs = prog.recv_of[prog.inst] == np.arange(prog.inst.size)
    excess = own_s - measured(prog)
    assert excess[recvs] == pytest.approx(500e-6)
    wire = np.where(recvs, np.nextafter(excess, 0.0), 1000e-6)
    assert (wire[recvs] < excess[recvs]).all()
    cal = fit_cpu_terms(prog, own, measured(prog), own_s.copy(), [1, 2, 3], own_wire_s=wire)
    assert cal.wire_share is not None
    assert cal.wire_share[recvs] == pytest.approx(1.0) and (cal.wire_share[recvs] <= 1.0).all()
    assert (cal.extra_s[recvs] == 0.0).all()
    slow = own_s * 10
    cal.add_to(slow, wire * 10)
    assert slow[recvs] == pytest.approx(5000e-6)


def test_a_receive_over_explained_beyond_its_wire_keeps_the_excess_in_seconds() -> None:
    # the model says 300 us (100 of wire, 200 of step latency); it took 50: the 250
    # too many are more than its wire, so they are the host's, not a share of the wire
    prog = a_message_a_step(took_us=50, size=100)
    own = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    own_s = modelled(prog, own, None, GLOO_REPLAY, Steps(default_latency_s=200e-6))
    recvs = prog.recv_of[prog.inst] == np.arange(prog.inst.size)
    assert own_s[recvs] == pytest.approx(300e-6)
    cal = fit_cpu_terms(prog, own, measured(prog), own_s, [1, 2, 3], own_wire_s=np.full(8, 1e-4))
    assert cal.wire_share is None
    assert cal.extra_s[recvs] == pytest.approx(-250e-6)


def test_a_collective_the_own_link_over_explains_keeps_a_share_never_more_than_its_own() -> None:
    # the model says 100 and 400 us (the wire), the calls took 50.5 and 200.5 on average
    # (rank 0 0.5 us early, rank 1 0.5 late): 49.5 and 199.5 us hid under the wire or are
    # the wire model's. On a 10x faster link they can be no more than a share of its
    # wire; on a 10x slower one no more than on the own link (hidden host work does not
    # grow with the wire). The members' lags stay in seconds.
    trace = make_trace(two_rank_run({100: 50.0, 400: 200.0}), [(0, 0, 0, 900), (1, 0, 0, 900)])
    prog = build_program(trace)
    fabric = Fabric(inter=WIRE, intra=WIRE, gpus_per_node=1)
    own = modelled(prog, fabric)
    cal = fit_cpu_terms(prog, fabric, measured(prog), own, [0, 1], own_wire_s=own.copy())
    assert cal.wire_share is not None and cal.capped is not None
    small = prog.trace.size_bytes == 100
    assert cal.wire_share[small] == pytest.approx(0.495)
    events, cap = cal.capped
    assert cap[small[events]] == pytest.approx(49.5e-6)
    assert cal.extra_s[small].tolist() == pytest.approx([-0.5e-6, 0.5e-6])  # the lags
    mine = own.copy()
    cal.add_to(mine, own)
    assert mine == pytest.approx(measured(prog), abs=1e-12)  # the own link: as measured
    for scale, expected in ((0.1, 10 - 4.95), (10.0, 1000 - 49.5)):
        times = own * scale
        cal.add_to(times, own * scale)
        assert times[small].tolist() == pytest.approx(
            [(expected - 0.5) * 1e-6, (expected + 0.5) * 1e-6]
        )


def test_a_collectives_wire_share_never_makes_it_longer_on_a_faster_link() -> None:
    # a host-bound 4-step op (its time grows by a quarter of its wire) the own link's
    # model over-explained by 8 of its 10 us of wire: a share of 0.8, 8 us off there
    from commlens.whatif.calibrate import Calibration

    cal = Calibration(np.zeros(1), [], np.array([0.8]), (np.array([0]), np.array([8e-6])))

    def on(wire_us: float) -> float:
        model = 100e-6 + wire_us * 1e-6 / 4  # host 100 us, a quarter of the wire on top
        times = np.array([model])
        cal.add_to(times, np.array([wire_us * 1e-6]), None, np.array([0.25]))
        return float(times[0])

    assert on(10) == pytest.approx(100e-6 + 2.5e-6 - 8e-6)  # the own link: as fitted
    # faster: off shrinks by no more than the op's own quarter of the wire saved
    times = [on(w) for w in (0, 2, 5, 10, 20, 40)]
    assert all(b >= a - 1e-15 for a, b in itertools.pairwise(times))
    # as a bare share (0.8 of the wire) the op came out longer on the faster link
    bare = Calibration(np.zeros(1), [], np.array([0.8]), (np.array([0]), np.array([8e-6])))
    t = np.array([100e-6 + 0.5e-6]), np.array([100e-6 + 2.5e-6])
    bare.add_to(t[0], np.array([2e-6]))
    bare.add_to(t[1], np.array([10e-6]))
    assert t[0][0] > t[1][0]
