"""A sweep file (TOML): settings, the grid, per-scheme settings, the studies' scale.

::

    [sweep]                 # name, run settings, and defaults of any point key
    name = "study-a"
    nproc = 4
    steps = 4
    networks = ["tcp-10g", "ipoib-100g", "rdma-100g"]

    [grid]                  # point keys, each a value or a list; the sweep is the product
    model = ["gpt-tiny", "bert-tiny"]
    scheme = ["dp", "tp", "pp"]
    link = ["500mbit", "unshaped"]

    [schemes.pp]            # point keys for the points of one scheme (win over the grid)
    pp = 2
    microbatches = 4

    [scale]                 # optional: the model's prediction at the studies' scale
    models = { gpt-tiny = "gpt-1.3b" }
    nproc = 8
    gpus_per_node = 4

Every unknown table or key is an error naming the file and the key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.job.options import point_defaults, point_keys
from commlens.numbers import MAX_TOLERANCE, number_problem
from commlens.predict.networks import SPEC_FORMS
from commlens.safefile import SMALL_LIMIT, parse_toml, read_text

LAUNCH_KEYS: dict[str, type] = {"nodes": int, "link": str}
"""Point keys of where the ranks run (``commlens run``'s --nodes and --link), not of the job."""

POINT_KEYS: dict[str, type] = {**point_keys(), **LAUNCH_KEYS}
"""Keys that describe one point, allowed in [sweep], [grid] and [schemes.NAME]: the
job's ``commlens run`` flags (:mod:`commlens.job.options`) and the launch keys."""

POINT_DEFAULTS: dict[str, Any] = {**point_defaults(), "nodes": 1, "link": "unshaped"}
"""Each point key's default (``commlens run``'s); model and scheme have none."""

MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest a point may run before it is stopped: a week."""
SAFE_NAME = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,99}$")
"""A sweep name: one path component, never ``.``, ``..`` or a hidden name."""

SCALE_KEYS = {"models", "nproc", "gpus_per_node", "seq_len", "micro_batch", "networks", "schemes"}
SCALE_SCHEME_KEYS = {"scheme", "dp", "tp", "pp", "microbatches", "sequence_parallel"}


@dataclass(frozen=True)
class Settings:
    """How every point runs and is checked (the [sweep] table's non-point keys)."""

    name: str = "sweep"
    """Name of the sweep (default output directory runs/NAME): letters, digits and
    ``._+-``, not starting with a dot."""
    title: str = ""
    """One line shown at the top of the report."""
    steps: int = 4
    """Training steps per point, warm-up included."""
    warmup_steps: int = 1
    """First steps of each point left out of the statistics."""
    seed: int = 1234
    """Seed of data and weights."""
    validate: bool = True
    """Hold every point against the analytical model (``commlens validate``)."""
    tolerance: float = 0.01
    """Relative byte tolerance of the validation."""
    networks: tuple[str, ...] = ("tcp-10g", "ipoib-100g", "rdma-100g")
    """Network profiles the model predicts each point on."""
    timeout_s: float = 900.0
    """A point still running after this long is stopped and recorded as failed (at most
    :data:`MAX_TIMEOUT_S`)."""


@dataclass(frozen=True)
class Scale:
    """The studies' scale: what the model predicts for each point's scheme there."""

    models: dict[str, str]
    """Preset of each point's model at the studies' scale (e.g. gpt-tiny → gpt-1.3b)."""
    nproc: int = 8
    """Ranks at the studies' scale."""
    gpus_per_node: int = 4
    """Ranks per node there."""
    seq_len: int = 1024
    """Tokens per sequence there."""
    micro_batch: int = 1
    """Sequences per micro-batch there."""
    networks: tuple[str, ...] = ("tcp-10g", "ipoib-100g", "rdma-100g")
    """Inter-node profiles predicted; speedups are over the first."""
    schemes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per scheme of the points: the scheme and dp/tp/pp/microbatches/sequence_parallel
    at that scale (e.g. a point's ``tp`` becomes Megatron's ``3d`` with tp in a node)."""


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file."""

    settings: Settings
    defaults: dict[str, Any]
    """Point keys from [sweep], over :data:`POINT_DEFAULTS`."""
    grid: dict[str, list[Any]]
    """Point keys from [grid], each a non-empty list, in file order."""
    schemes: dict[str, dict[str, Any]]
    """Point keys from [schemes.NAME]."""
    scale: Scale | None = None
    source: str = ""
    """The file's text (saved in the sweep directory)."""
    path: str = ""


def _fail(where: str, what: str) -> UsageError:
    return UsageError(f"{where}: {what}")


def _check_value(where: str, key: str, value: Any, kind: type) -> Any:
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise _fail(where, f"{key} must be a {kind.__name__}, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise _fail(where, f"{key} must be at least 1, got {value}")
    return value


def _point_table(where: str, table: Any, allow_lists: bool) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _fail(where, "must be a table")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in POINT_KEYS:
            raise _fail(where, f"unknown key {key!r}; point keys are {', '.join(POINT_KEYS)}")
        if isinstance(value, list):
            if not allow_lists:
                raise _fail(where, f"{key} takes one value here (lists belong in [grid])")
            if not value:
                raise _fail(where, f"{key} is an empty list")
            out[key] = [_check_value(where, key, v, POINT_KEYS[key]) for v in value]
        else:
            checked = _check_value(where, key, value, POINT_KEYS[key])
            out[key] = [checked] if allow_lists else checked
    return out


def _settings(where: str, table: dict[str, Any]) -> Settings:
    kinds: dict[str, type] = {
        "name": str,
        "title": str,
        "steps": int,
        "warmup_steps": int,
        "seed": int,
        "validate": bool,
        "tolerance": float,
        "timeout_s": float,
    }
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "networks":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(where, f"networks must be a list of networks: {SPEC_FORMS}")
            values[key] = tuple(value)
        elif key in kinds:
            kind = kinds[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
                raise _fail(where, f"{key} must be a {kind.__name__}, got {value!r}")
            values[key] = value
    s = Settings(**values)
    if not SAFE_NAME.match(s.name):
        raise _fail(
            where,
            f"name {s.name!r} must be 1 to 100 letters, digits or ._+- "
            "(not starting with a dot); it names the sweep's directory",
        )
    if s.steps < 2:
        raise _fail(where, f"steps must be at least 2 (step 0 is set-up), got {s.steps}")
    if not 0 <= s.warmup_steps < s.steps:
        raise _fail(where, f"warmup_steps must be between 0 and steps - 1, got {s.warmup_steps}")
    for key, high in (("tolerance", MAX_TOLERANCE), ("timeout_s", MAX_TIMEOUT_S)):
        problem = number_problem(getattr(s, key), low=0.0, high=high, low_open=True)
        if problem:
            raise _fail(where, f"{key} {problem}")
    return s


def _scale(where: str, table: Any) -> Scale:
    if not isinstance(table, dict):
        raise _fail(where, "must be a table")
    unknown = set(table) - SCALE_KEYS
    if unknown:
        raise _fail(where, f"unknown key {sorted(unknown)[0]!r}; keys are {sorted(SCALE_KEYS)}")
    models = table.get("models")
    if not isinstance(models, dict) or not models:
        raise _fail(where, "models must be a table from a point's model to a preset")
    values: dict[str, Any] = {"models": {str(k): str(v) for k, v in models.items()}}
    for key in ("nproc", "gpus_per_node", "seq_len", "micro_batch"):
        if key in table:
            values[key] = _check_value(where, key, table[key], int)
    if "networks" in table:
        nets = table["networks"]
        if not isinstance(nets, list) or not nets or not all(isinstance(n, str) for n in nets):
            raise _fail(where, f"networks must be a non-empty list of networks: {SPEC_FORMS}")
        values["networks"] = tuple(nets)
    schemes = table.get("schemes", {})
    if not isinstance(schemes, dict):
        raise _fail(where, "schemes must be a table of tables")
    for name, sub in schemes.items():
        bad = set(sub) - SCALE_SCHEME_KEYS if isinstance(sub, dict) else {"(not a table)"}
        if bad:
            raise _fail(f"{where}.schemes.{name}", f"unknown key {sorted(bad)[0]!r}")
    values["schemes"] = {str(k): dict(v) for k, v in schemes.items()}
    return Scale(**values)


def parse_spec(text: str, where: str = "sweep") -> SweepSpec:
    """Parse a sweep file's text; a one-line :class:`UsageError` on any mistake."""
    try:
        data = parse_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(where, f"not valid TOML ({exc})") from None
    unknown = set(data) - {"sweep", "grid", "schemes", "scale"}
    if unknown:
        raise _fail(
            where,
            f"unknown table [{sorted(unknown)[0]}]; use [sweep], [grid], [schemes.*], [scale]",
        )
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        raise _fail(where, "[sweep] must be a table")
    setting_keys = set(Settings.__dataclass_fields__)
    unknown_keys = set(sweep) - setting_keys - set(POINT_KEYS)
    if unknown_keys:
        raise _fail(
            f"{where} [sweep]",
            f"unknown key {sorted(unknown_keys)[0]!r}; settings are "
            f"{', '.join(sorted(setting_keys))} plus any point key",
        )
    settings = _settings(f"{where} [sweep]", {k: v for k, v in sweep.items() if k in setting_keys})
    defaults = dict(POINT_DEFAULTS)
    defaults.update(
        _point_table(f"{where} [sweep]", {k: v for k, v in sweep.items() if k in POINT_KEYS}, False)
    )
    grid = _point_table(f"{where} [grid]", data.get("grid", {}), True)
    for key in ("model", "scheme"):
        if key not in grid and key not in defaults:
            raise _fail(where, f"no {key}: give one in [sweep] or a list in [grid]")
    schemes_raw = data.get("schemes", {})
    if not isinstance(schemes_raw, dict):
        raise _fail(where, "[schemes] must hold tables like [schemes.pp]")
    schemes = {
        str(name): _point_table(f"{where} [schemes.{name}]", table, False)
        for name, table in schemes_raw.items()
    }
    scale = _scale(f"{where} [scale]", data["scale"]) if "scale" in data else None
    return SweepSpec(settings, defaults, grid, schemes, scale, source=text)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and parse a sweep file."""
    try:
        text = read_text(path, limit=SMALL_LIMIT)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such sweep file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: cannot read ({exc})") from None
    spec = parse_spec(text, str(path))
    return SweepSpec(
        spec.settings, spec.defaults, spec.grid, spec.schemes, spec.scale, text, str(path)
    )
