"""Network profiles: the latency and bandwidth a cost model charges, as data.

A profile is a small TOML file. Built-ins live in ``commlens/model/profiles``;
``--net FILE.toml`` loads a user's own, and ``commlens bench --fit FILE.toml``
writes one calibrated on the machine at hand. The format::

    name = "rdma-100g"                  # required, the name tables show
    source = "where the numbers come from (paper, datasheet, calibration run)"
    scope = "inter"                     # "intra" (inside a node), "inter" or "both"
    description = "optional one line"

    [link]                              # required
    latency_s = 2e-6                    # alpha: seconds per message / algorithm step
    bandwidth_Gbps = 100.0              # nominal link rate, Gbit/s (1e9)
    efficiency = 0.9                    # share of the nominal rate reached, (0, 1]

    [ops.all_reduce]                    # optional per-op overrides (fitted profiles)
    alpha_s = 2.4e-6                    # replaces latency_s for this op
    beta_s_per_byte = 9.1e-11           # replaces 8 / (bandwidth_Gbps·1e9·efficiency)

Op names under ``[ops]`` are the canonical capture names (all_reduce,
all_gather, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all,
send, recv, barrier). Either key of an override may be left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import tomllib

from commlens.errors import UsageError
from commlens.spec.ops import TENSOR_OPS

OPS = TENSOR_OPS  # the ops a profile may override
SCOPES = ("intra", "inter", "both")


@dataclass(frozen=True)
class OpOverride:
    """A fitted alpha/beta for one op; ``None`` keeps the link's value."""

    alpha_s: float | None = None
    """Seconds per message (per algorithm step)."""
    beta_s_per_byte: float | None = None
    """Seconds per byte on the wire."""


@dataclass(frozen=True)
class NetworkProfile:
    """One link type: latency, bandwidth and efficiency, with their source."""

    name: str
    """Name shown in tables and accepted by ``--net``."""
    latency_s: float
    """Alpha: seconds per message or algorithm step."""
    bandwidth_Gbps: float
    """Nominal link rate in Gbit/s (1e9 bit/s)."""
    efficiency: float = 1.0
    """Share of the nominal rate reached by large messages, in (0, 1]."""
    scope: str = "both"
    """Where the link applies: "intra" (inside a node), "inter" or "both"."""
    source: str = ""
    """Where the numbers come from."""
    description: str = ""
    """One line about the link."""
    ops: dict[str, OpOverride] = field(default_factory=dict)
    """Per-op alpha/beta overrides, by canonical op name."""

    def __post_init__(self) -> None:
        where = f"network profile {self.name!r}"
        if not self.name:
            raise UsageError("network profile has an empty name")
        if self.latency_s < 0:
            raise UsageError(f"{where}: latency_s must be >= 0, got {self.latency_s}")
        if self.bandwidth_Gbps <= 0:
            raise UsageError(f"{where}: bandwidth_Gbps must be > 0, got {self.bandwidth_Gbps}")
        if not 0 < self.efficiency <= 1:
            raise UsageError(f"{where}: efficiency must be in (0, 1], got {self.efficiency}")
        if self.scope not in SCOPES:
            raise UsageError(
                f"{where}: scope must be one of {', '.join(SCOPES)}, got {self.scope!r}"
            )
        for op, override in self.ops.items():
            if op not in OPS:
                raise UsageError(f"{where}: unknown op {op!r} under [ops]")
            for key in ("alpha_s", "beta_s_per_byte"):
                value = getattr(override, key)
                if value is not None and value < 0:
                    raise UsageError(f"{where}: ops.{op}.{key} must be >= 0, got {value}")

    @property
    def effective_Gbps(self) -> float:
        """Achievable large-message rate in Gbit/s."""
        return self.bandwidth_Gbps * self.efficiency

    def alpha(self, op: str) -> float:
        """Seconds per message for ``op``."""
        override = self.ops.get(op)
        if override is not None and override.alpha_s is not None:
            return override.alpha_s
        return self.latency_s

    def beta(self, op: str) -> float:
        """Seconds per byte for ``op``."""
        override = self.ops.get(op)
        if override is not None and override.beta_s_per_byte is not None:
            return override.beta_s_per_byte
        return 8.0 / (self.bandwidth_Gbps * 1e9 * self.efficiency)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "description": self.description,
            "scope": self.scope,
            "source": self.source,
            "latency_s": self.latency_s,
            "bandwidth_Gbps": self.bandwidth_Gbps,
            "efficiency": self.efficiency,
            "effective_Gbps": self.effective_Gbps,
        }
        if self.ops:
            out["ops"] = {
                op: {"alpha_s": o.alpha_s, "beta_s_per_byte": o.beta_s_per_byte}
                for op, o in sorted(self.ops.items())
            }
        return out


def _number(table: dict[str, object], key: str, where: str, default: float | None = None) -> float:
    value = table.get(key, default)
    if value is None:
        raise UsageError(f"{where}: missing [link] {key}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def profile_from_dict(data: dict[str, object], where: str) -> NetworkProfile:
    """Build a profile from parsed TOML; ``where`` names the file in errors."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f'{where}: missing top-level name = "..."')
    link = data.get("link")
    if not isinstance(link, dict):
        raise UsageError(f"{where}: missing [link] table (latency_s, bandwidth_Gbps, efficiency)")
    ops: dict[str, OpOverride] = {}
    raw_ops = data.get("ops", {})
    if not isinstance(raw_ops, dict):
        raise UsageError(f"{where}: [ops] must be a table of per-op tables")
    for op, table in raw_ops.items():
        if not isinstance(table, dict):
            raise UsageError(f"{where}: [ops.{op}] must be a table")
        alpha = table.get("alpha_s")
        beta = table.get("beta_s_per_byte")
        ops[op] = OpOverride(
            alpha_s=None if alpha is None else _number(table, "alpha_s", where),
            beta_s_per_byte=None if beta is None else _number(table, "beta_s_per_byte", where),
        )
    try:
        return _build(data, name, link, ops, where)
    except UsageError as exc:
        if where in str(exc):
            raise
        raise UsageError(f"{where}: {exc}") from None


def _build(
    data: dict[str, object],
    name: str,
    link: dict[str, object],
    ops: dict[str, OpOverride],
    where: str,
) -> NetworkProfile:
    return NetworkProfile(
        name=name,
        latency_s=_number(link, "latency_s", where),
        bandwidth_Gbps=_number(link, "bandwidth_Gbps", where),
        efficiency=_number(link, "efficiency", where, default=1.0),
        scope=str(data.get("scope", "both")),
        source=str(data.get("source", "")),
        description=str(data.get("description", "")),
        ops=ops,
    )


def load_profile_file(path: str | Path) -> NetworkProfile:
    """Read a profile TOML file; a bad file raises :class:`UsageError` naming it."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"network profile file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read network profile {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"network profile {path} is not valid TOML: {exc}") from None
    return profile_from_dict(data, str(path))


def builtin_names() -> list[str]:
    """Names of the built-in profiles, sorted by effective bandwidth."""
    return [p.name for p in builtin_profiles()]


def builtin_profiles() -> list[NetworkProfile]:
    """Every built-in profile, slowest first."""
    folder = resources.files("commlens.model") / "profiles"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
            found.append(profile_from_dict(data, f"built-in profile {entry.name}"))
    return sorted(found, key=lambda p: (p.effective_Gbps, p.name))


def get_profile(spec: str) -> NetworkProfile:
    """A built-in profile by name, or a profile file when ``spec`` is a path."""
    if spec.endswith(".toml") or "/" in spec or Path(spec).is_file():
        return load_profile_file(spec)
    for profile in builtin_profiles():
        if profile.name == spec:
            return profile
    raise UsageError(
        f"unknown network profile {spec!r}; built-ins: {', '.join(builtin_names())} "
        "(or give a FILE.toml)"
    )


def get_profiles(specs: str) -> list[NetworkProfile]:
    """Profiles from a comma-separated list of names or files."""
    names = [s.strip() for s in specs.split(",") if s.strip()]
    if not names:
        raise UsageError("no network profile given; try --net tcp-10g,rdma-100g")
    return [get_profile(name) for name in names]
