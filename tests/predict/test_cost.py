"""Predicted times against the alpha-beta formulas, computed by hand."""

from __future__ import annotations

import math

import pytest

from commlens.errors import UsageError
from commlens.optable import wire_factor
from commlens.predict.cost import flat_time
from commlens.predict.profiles import NetworkProfile, OpOverride
from commlens.predict.topology import Fabric, link_flows

A, B = 1e-5, 1e-9  # alpha (s), beta (s/byte)
S = 1_000_000

# (op, n, algorithm, hand-computed seconds for S bytes)
FLAT_CASES = [
    ("all_reduce", 4, "ring", 6e-5 + 1.5e-3),  # 2·3·α + 2·(3/4)·Sβ
    ("all_reduce", 4, "tree", 4e-5 + 2e-3),  # 2·log2(4)·α + 2·Sβ
    ("all_reduce", 4, "direct", 2e-5 + 1.5e-3),  # 2α + 2·(3/4)·Sβ
    ("all_reduce", 8, "ring", 14e-5 + 1.75e-3),  # 2·7·α + 2·(7/8)·Sβ
    ("all_reduce", 5, "tree", 6e-5 + 2e-3),  # 2·⌈log2 5⌉ = 6
    ("all_gather", 4, "ring", 3e-5 + 0.75e-3),  # 3α + (3/4)·Sβ
    ("all_gather", 8, "tree", 3e-5 + 0.875e-3),  # log2(8)·α + (7/8)·Sβ
    ("all_gather", 8, "direct", 1e-5 + 0.875e-3),
    ("reduce_scatter", 2, "ring", 1e-5 + 0.5e-3),
    ("reduce_scatter", 16, "tree", 4e-5 + 0.9375e-3),
    ("broadcast", 4, "ring", 3e-5 + 1e-3),  # (n−1)α + Sβ
    ("broadcast", 4, "tree", 2 * (1e-5 + 1e-3)),  # log2(4)·(α + Sβ)
    ("broadcast", 4, "direct", 1e-5 + 3e-3),  # α + (n−1)·Sβ
    ("reduce", 8, "tree", 3 * (1e-5 + 1e-3)),
    ("all_to_all", 4, "ring", 3 * (1e-5 + 0.25e-3)),  # (n−1)(α + Sβ/n)
    ("all_to_all", 4, "tree", 2 * (1e-5 + 0.5e-3)),  # Bruck: log2(n)(α + Sβ/2)
    ("all_to_all", 4, "direct", 1e-5 + 0.75e-3),
    ("send", 2, "ring", 1e-5 + 1e-3),
    ("recv", 2, "tree", 1e-5 + 1e-3),
    ("gather", 4, "direct", 1e-5 + 0.75e-3),
    ("all_reduce", 1, "ring", 0.0),  # a group of one costs nothing
]


@pytest.mark.parametrize(("op", "n", "algo", "expected"), FLAT_CASES)
def test_flat_time_matches_hand_formula(op: str, n: int, algo: str, expected: float) -> None:
    assert flat_time(op, S, n, A, B, algo) == pytest.approx(expected, rel=1e-12)


def test_barrier_is_a_zero_byte_all_reduce() -> None:
    assert flat_time("barrier", 0, 4, A, B, "ring") == pytest.approx(6e-5)


def test_auto_takes_the_fastest_algorithm() -> None:
    small = flat_time("all_reduce", 8, 64, A, B, "auto")
    assert small == pytest.approx(2 * 6 * A + 2 * 8 * B)  # tree wins for tiny messages
    big = flat_time("all_reduce", 1e9, 64, A, B, "auto")
    assert big == pytest.approx(2 * 63 * A + 2 * 63 / 64 * 1e9 * B)  # ring wins on bandwidth
    a2a = flat_time("all_to_all", 1e6, 8, A, B, "auto")
    assert a2a == pytest.approx(A + 7 / 8 * 1e6 * B)  # all-to-all is direct


def test_unknown_algorithm_and_op_are_user_errors() -> None:
    with pytest.raises(UsageError, match="algorithm"):
        flat_time("all_reduce", S, 4, A, B, "butterfly")
    with pytest.raises(UsageError, match="op"):
        flat_time("all_shuffle", S, 4, A, B, "ring")


@pytest.mark.parametrize(
    ("op", "n", "ring", "study_b"),
    [
        ("all_reduce", 4, 1.5, 2.0),
        ("all_gather", 4, 0.75, 1.0),
        ("reduce_scatter", 8, 0.875, 1.0),
        ("all_to_all", 2, 0.5, 1.0),
        ("broadcast", 4, 1.0, 1.0),
        ("send", 2, 1.0, 1.0),
        ("all_reduce", 1, 0.0, 0.0),
    ],
)
def test_wire_conventions(op: str, n: int, ring: float, study_b: float) -> None:
    assert wire_factor(op, n) == pytest.approx(ring)
    assert wire_factor(op, n, "study_b") == pytest.approx(study_b)


def _profile(name: str, latency: float, gbps: float, **kw: object) -> NetworkProfile:
    return NetworkProfile(name=name, latency_s=latency, bandwidth_Gbps=gbps, **kw)  # type: ignore[arg-type]


INTER = _profile("inter", 1e-5, 8.0)  # β = 1e-9 s/byte
INTRA = _profile("intra", 1e-6, 80.0)  # β = 1e-10 s/byte
AI, BI = 1e-6, 1e-10


def test_profile_beta_from_bandwidth_and_efficiency() -> None:
    assert INTER.beta("all_reduce") == pytest.approx(1e-9)
    half = _profile("half", 1e-5, 8.0, efficiency=0.5)
    assert half.beta("send") == pytest.approx(2e-9)
    fitted = _profile("fit", 1e-5, 8.0, ops={"all_reduce": OpOverride(3e-6, 5e-10)})
    assert fitted.alpha("all_reduce") == 3e-6 and fitted.beta("all_reduce") == 5e-10
    assert fitted.alpha("send") == 1e-5 and fitted.beta("send") == pytest.approx(1e-9)


def test_group_on_one_node_uses_the_intra_link() -> None:
    fabric = Fabric(inter=INTER, intra=INTRA, gpus_per_node=4)
    assert fabric.time("all_reduce", S, (0, 1, 2, 3)) == pytest.approx(6 * AI + 1.5 * S * BI)


def test_group_with_one_rank_per_node_uses_the_inter_link_shared_by_flows() -> None:
    fabric = Fabric(inter=INTER, intra=INTRA, gpus_per_node=2)
    # ranks 0 and 2 sit on nodes 0 and 1; two such groups share each node link
    assert fabric.time("all_reduce", S, (0, 2), flows=2) == pytest.approx(2 * A + S * B * 2)
    assert fabric.time("send", S, (0, 2), flows=1) == pytest.approx(A + S * B)
    assert fabric.time("send", S, (0, 1)) == pytest.approx(AI + S * BI)


def test_hierarchical_all_reduce_by_hand() -> None:
    fabric = Fabric(inter=INTER, intra=INTRA, gpus_per_node=2)
    group = (0, 1, 2, 3)  # 2 nodes × 2 ranks
    rs_intra = AI + 0.5 * S * BI  # reduce-scatter of S over 2 ranks
    ar_inter = 2 * A + 2 * 0.5 * (S / 2) * (B * 2)  # S/2 over 2 nodes, 2 flows per link
    ag_intra = AI + 0.5 * S * BI
    assert fabric.time("all_reduce", S, group, flows=2) == pytest.approx(
        rs_intra + ar_inter + ag_intra
    )
    ag = (A + 0.5 * (S / 2) * (B * 2)) + (AI + 0.5 * S * BI)
    assert fabric.time("all_gather", S, group, flows=2) == pytest.approx(ag)
    bcast = (A + S * B * 2) + (AI + S * BI)
    assert fabric.time("broadcast", S, group, flows=2) == pytest.approx(bcast)
    a2a = (A + S * 2 / 4 * B * 2) + (AI + S * 1 / 4 * BI)
    assert fabric.time("all_to_all", S, group, flows=2) == pytest.approx(a2a)


def test_link_flows_counts_ranks_leaving_the_busiest_node() -> None:
    fabric = Fabric(inter=INTER, intra=INTRA, gpus_per_node=4)
    tp_groups = [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert link_flows(fabric, tp_groups) == 1  # nothing leaves a node
    dp_groups = [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert link_flows(fabric, dp_groups) == 4
    assert link_flows(fabric, [(0, 4)]) == 1


def test_bad_fabric_settings_are_user_errors() -> None:
    with pytest.raises(UsageError, match="gpus-per-node"):
        Fabric(inter=INTER, intra=INTRA, gpus_per_node=0)
    with pytest.raises(UsageError, match="algorithm"):
        Fabric(inter=INTER, intra=INTRA, algorithm="magic")
    assert math.isfinite(Fabric(inter=INTER, intra=INTRA).time("all_reduce", S, (0, 1, 2)))


def test_nics_per_node_share_the_flows() -> None:
    one = Fabric(inter=INTER, intra=INTRA, gpus_per_node=4)
    four = Fabric(inter=INTER, intra=INTRA, gpus_per_node=4, nics_per_node=4)
    two = Fabric(inter=INTER, intra=INTRA, gpus_per_node=4, nics_per_node=2)
    pair = (0, 4)
    assert one.time("send", S, pair, flows=4) == pytest.approx(A + 4 * S * B)
    assert two.time("send", S, pair, flows=4) == pytest.approx(A + 2 * S * B)
    assert four.time("send", S, pair, flows=4) == pytest.approx(A + S * B)
    assert four.time("send", S, pair, flows=3) == pytest.approx(A + S * B)
    with pytest.raises(UsageError, match="nics-per-node"):
        Fabric(inter=INTER, intra=INTRA, nics_per_node=0)
