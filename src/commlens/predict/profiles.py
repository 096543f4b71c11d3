"""Network profiles: the latency and bandwidth a cost model charges, as data.

A profile is a small TOML file. Built-ins live in ``commlens/predict/profiles``;
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
send, recv, barrier). Either key of an override may be left out; ``r2``,
``max_rel_err``, ``points`` and ``fit`` (written by ``bench --fit``) describe
the fit and are not used.

Every number must be finite and physically plausible (see :data:`BOUNDS`:
a link between 100 kbit/s and 1 Pbit/s, latencies under 10 s), and every key
known; a file over :data:`MAX_FILE_BYTES` or nested too deep for the TOML
parser is refused with one line before anything is computed.
"""

from __future__ import annotations

import errno
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from commlens.errors import UsageError
from commlens.optable import TENSOR_OPS
from commlens.safefile import read_text

OPS = TENSOR_OPS  # the ops a profile may override
SCOPES = ("intra", "inter", "both")

MIN_GBPS = 1e-4
"""Slowest link a profile may describe, Gbit/s (100 kbit/s, the slowest emulated link)."""
MAX_GBPS = 1e6
"""Fastest link a profile may describe, Gbit/s (1 Pbit/s, ~300x NVLink 4)."""
MIN_EFFECTIVE_GBPS = MIN_GBPS / 10
"""Slowest achieved rate (bandwidth x efficiency, or 8 / beta), Gbit/s."""
MAX_LATENCY_S = 10.0
"""Longest latency per message a profile may give, seconds."""
BOUNDS: dict[str, tuple[float, float]] = {
    "latency_s": (0.0, MAX_LATENCY_S),
    "bandwidth_Gbps": (MIN_GBPS, MAX_GBPS),
    "efficiency": (1e-3, 1.0),
    "alpha_s": (0.0, MAX_LATENCY_S),
    "beta_s_per_byte": (8.0 / (MAX_GBPS * 1e9), 8.0 / (MIN_EFFECTIVE_GBPS * 1e9)),
}
"""Inclusive [low, high] of every numeric field (beta: 8 bits per byte over the link range)."""
MAX_FILE_BYTES = 64 * 1024
"""Largest profile file read (a fitted profile is about 2 KB)."""
MAX_NETWORKS = 32
"""Most profiles one comma list may name."""
MAX_TEXT = 2000
"""Longest name, source or description, in characters."""

TOP_KEYS = ("name", "description", "scope", "source", "link", "ops")
LINK_KEYS = ("latency_s", "bandwidth_Gbps", "efficiency")
OP_KEYS = ("alpha_s", "beta_s_per_byte")
OP_INFO_KEYS = ("r2", "max_rel_err", "points", "fit")  # fit quality, written by bench --fit


def check_number(key: str, value: float, where: str) -> None:
    """A one-line :class:`UsageError` unless ``value`` is finite and within ``BOUNDS[key]``."""
    low, high = BOUNDS[key]
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(
            f"{where}: {key} must be a finite number in [{low:g}, {high:g}], got {value}"
        )


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
        if not self.name:
            raise UsageError("network profile has an empty name")
        where = f"network profile {self.name!r}"
        _check_text("name", self.name, where)
        for key in LINK_KEYS:
            check_number(key, getattr(self, key), where)
        if self.effective_Gbps < MIN_EFFECTIVE_GBPS:
            raise UsageError(
                f"{where}: bandwidth_Gbps x efficiency is {self.effective_Gbps:g} Gbit/s, "
                f"below the slowest rate a profile may describe ({MIN_EFFECTIVE_GBPS:g})"
            )
        if self.scope not in SCOPES:
            raise UsageError(
                f"{where}: scope must be one of {', '.join(SCOPES)}, got {self.scope!r}"
            )
        for op, override in self.ops.items():
            if op not in OPS:
                raise UsageError(f"{where}: unknown op {op!r} under [ops]")
            for key in OP_KEYS:
                value = getattr(override, key)
                if value is not None:
                    check_number(key, value, f"{where}, ops.{op}")

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


def check_profile_name(name: str, where: str) -> None:
    """A one-line :class:`UsageError` unless ``name`` can name a profile."""
    if not name:
        raise UsageError(f"{where}: a network profile needs a non-empty name")
    _check_text("name", name, where)


def _check_text(key: str, value: str, where: str) -> None:
    if len(value) > MAX_TEXT or not value.isprintable():
        raise UsageError(
            f"{where}: {key} must be one printable line of at most {MAX_TEXT} characters"
        )


def _check_keys(table: dict[str, object], known: tuple[str, ...], what: str, where: str) -> None:
    unknown = sorted(str(k) for k in table if k not in known)
    if unknown:
        raise UsageError(
            f"{where}: unknown key {unknown[0]!r} in {what}; known keys: {', '.join(known)}"
        )


def _number(table: dict[str, object], key: str, where: str, default: float | None = None) -> float:
    value = table.get(key, default)
    if value is None:
        raise UsageError(f"{where}: missing [link] {key}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where}: {key} must be a number, got {_short(value)}")
    number = float(value)
    check_number(key, number, where)
    return number


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _string(data: dict[str, object], key: str, where: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise UsageError(f"{where}: {key} must be a string, got {_short(value)}")
    _check_text(key, value, where)
    return value


def _op_override(op: str, table: object, where: str) -> OpOverride:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: [ops.{op}] must be a table")
    if op not in OPS:
        raise UsageError(f"{where}: unknown op {op!r} under [ops]; known: {', '.join(OPS)}")
    _check_keys(table, OP_KEYS + OP_INFO_KEYS, f"[ops.{op}]", where)
    for key in ("r2", "max_rel_err", "points"):
        value = table.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise UsageError(
                f"{where}: ops.{op}.{key} must be a finite number, got {_short(value)}"
            )
    if "fit" in table and not isinstance(table["fit"], str):
        raise UsageError(f"{where}: ops.{op}.fit must be a string")
    here = f"{where}: ops.{op}"
    alpha = table.get("alpha_s")
    beta = table.get("beta_s_per_byte")
    return OpOverride(
        alpha_s=None if alpha is None else _number(table, "alpha_s", here),
        beta_s_per_byte=None if beta is None else _number(table, "beta_s_per_byte", here),
    )


def profile_from_dict(data: dict[str, object], where: str) -> NetworkProfile:
    """Build a profile from parsed TOML; ``where`` names the file in errors."""
    _check_keys(data, TOP_KEYS, "the top level", where)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f'{where}: missing top-level name = "..."')
    link = data.get("link")
    if not isinstance(link, dict):
        raise UsageError(f"{where}: missing [link] table (latency_s, bandwidth_Gbps, efficiency)")
    _check_keys(link, LINK_KEYS, "[link]", where)
    raw_ops = data.get("ops", {})
    if not isinstance(raw_ops, dict):
        raise UsageError(f"{where}: [ops] must be a table of per-op tables")
    ops = {str(op): _op_override(str(op), table, where) for op, table in raw_ops.items()}
    try:
        return NetworkProfile(
            name=name,
            latency_s=_number(link, "latency_s", where),
            bandwidth_Gbps=_number(link, "bandwidth_Gbps", where),
            efficiency=_number(link, "efficiency", where, default=1.0),
            scope=_string(data, "scope", where, "both"),
            source=_string(data, "source", where, ""),
            description=_string(data, "description", where, ""),
            ops=ops,
        )
    except UsageError as exc:
        message = str(exc)
        if where in message:
            raise
        own = f"network profile {name!r}: "  # the dataclass's own prefix, replaced by the file's
        raise UsageError(f"{where}: {message.removeprefix(own)}") from None


def parse_profile_text(text: str, where: str) -> NetworkProfile:
    """Parse and check a profile's TOML text; any failure is one :class:`UsageError` line."""
    if len(text) > MAX_FILE_BYTES:
        raise UsageError(
            f"{where} is {len(text):,} characters; a network profile is at most {MAX_FILE_BYTES:,}"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where} is not valid TOML: {_one_line(exc)}") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to be a network profile") from None
    except Exception as exc:  # whatever else hostile text makes the parser raise
        raise UsageError(f"{where} cannot be parsed as TOML: {_one_line(exc)}") from None
    return profile_from_dict(data, where)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def load_profile_file(path: str | Path) -> NetworkProfile:
    """Read a profile TOML file; a bad file raises :class:`UsageError` naming it."""
    path = Path(path)
    try:
        if path.is_dir():
            raise UsageError(f"network profile {path} is a folder, not a FILE.toml")
        text = read_text(path, limit=MAX_FILE_BYTES)
    except FileNotFoundError:
        raise UsageError(f"network profile file {path} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise UsageError(
                f"network profile {path} is over {MAX_FILE_BYTES:,} bytes; "
                "a network profile is a few lines of TOML"
            ) from None
        raise UsageError(f"cannot read network profile {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read network profile {path}: {_one_line(exc)}") from None
    return parse_profile_text(text, f"network profile {path}")


def builtin_names() -> list[str]:
    """Names of the built-in profiles, sorted by effective bandwidth."""
    return [p.name for p in builtin_profiles()]


def builtin_profiles() -> list[NetworkProfile]:
    """Every built-in profile, slowest first."""
    folder = resources.files("commlens.predict") / "profiles"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".toml"):
            text = entry.read_text(encoding="utf-8")
            found.append(parse_profile_text(text, f"built-in profile {entry.name}"))
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
    if len(names) > MAX_NETWORKS:
        raise UsageError(f"{len(names)} network profiles given; at most {MAX_NETWORKS} at once")
    return [get_profile(name) for name in names]
