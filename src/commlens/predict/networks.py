"""The one grammar of a network on the command line: ``predict``, ``whatif`` and
``sweep`` turn a spec into a :class:`~commlens.predict.profiles.NetworkProfile`
by :func:`network_profile`.

A spec is a profile name (``tcp-10g``), a profile file (``FILE.toml``, as
``bench --fit`` writes one), a link rate (``200mbit``: an emulated link of that
rate, see :func:`emulated_profile`) or ``unshaped`` (an emulated link without a
rate: the veth pair, as the loopback profile).
"""

from __future__ import annotations

from commlens.netem.cluster import BURST_S, SHAPED_EFFICIENCY, burst_bytes
from commlens.netem.rate import parse_rate
from commlens.predict.profiles import MAX_NETWORKS, NetworkProfile, get_profile, get_profiles

__all__ = [
    "BURST_S",
    "SPEC_FORMS",
    "UNSHAPED",
    "emulated_profile",
    "is_rate",
    "link_burst",
    "network_profile",
    "network_profiles",
]

UNSHAPED = "unshaped"
"""The spec of an emulated link without a rate: the veth pair, as loopback."""
SPEC_FORMS = 'profile names, profile files (FILE.toml), link rates ("200mbit") or "unshaped"'
"""What a network spec may be, in words, for an error that names a bad one."""


def emulated_profile(rate_bits: float, label: str, why: str) -> NetworkProfile:
    """An emulated link of ``rate_bits``: the shaper's efficiency (netem's
    :data:`~commlens.netem.cluster.SHAPED_EFFICIENCY`) and the latency of the
    loopback profile (the veth pair under the shaper is loopback's)."""
    return NetworkProfile(
        name=label,
        latency_s=get_profile("loopback").latency_s,
        bandwidth_Gbps=rate_bits / 1e9,
        efficiency=SHAPED_EFFICIENCY,
        scope="inter",
        source=f"{why} ({rate_bits / 1e9:g} Gbit/s shaped); efficiency {SHAPED_EFFICIENCY} "
        "as measured (docs/conventions.md §4); latency of loopback",
    )


def is_rate(spec: str) -> bool:
    """True for a spec that names a link rate (``200mbit``), not a profile."""
    return spec[:1].isdigit() and not spec.endswith(".toml")


def network_profile(spec: str, label: str | None = None) -> NetworkProfile:
    """The profile of one network spec (see the module docstring); ``label`` names an
    emulated link (default: the spec itself)."""
    spec = spec.strip()
    if spec == UNSHAPED:
        loopback = get_profile("loopback")
        return NetworkProfile(
            name=label or UNSHAPED,
            latency_s=loopback.latency_s,
            bandwidth_Gbps=loopback.bandwidth_Gbps,
            efficiency=loopback.efficiency,
            scope="inter",
            source=f"an unshaped emulated link (veth), as the loopback profile: {loopback.source}",
        )
    if is_rate(spec):
        return emulated_profile(parse_rate(spec), label or spec, "an emulated link of that rate")
    return get_profile(spec)


def network_profiles(specs: str) -> list[NetworkProfile]:
    """The profiles of a comma list of :func:`network_profile` specs."""
    names = [s.strip() for s in specs.split(",") if s.strip()]
    if not names or len(names) > MAX_NETWORKS:
        get_profiles(specs)  # refuses an empty or too long list with its one line
    return [network_profile(name) for name in names]


def link_burst(profile: NetworkProfile) -> float:
    """Bytes of the bucket of an emulated link named by its rate (0 for other networks)."""
    if not is_rate(profile.name):
        return 0.0
    return float(burst_bytes(parse_rate(profile.name)))
