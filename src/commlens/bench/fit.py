"""Alpha-beta fits of bench results, written as a network profile (TOML).

Per op, ``t(S) = A + B·S`` is fitted to the median call time by least squares
on relative error (weights 1/t), so small and large sizes count alike. The profile stores, as
:mod:`commlens.predict.profiles` expects, ``alpha_s`` per algorithm step and
``beta_s_per_byte`` per byte on the wire of the ring algorithm of
:func:`commlens.predict.cost.flat_time` on the bench's group size ``n``
(e.g. all-reduce: ``A = 2(n−1)·alpha``, ``B = 2(n−1)/n·beta``), so that the
model's ring time of each op reproduces the fitted line. ``r2`` (on ``t``)
and ``max_rel_err`` tell the fit quality; the loader ignores them.

Neither term may be negative. An op whose time does not grow with size over
the sizes measured (a fast link under a busy host: the slope lies in the
noise) is *flat*: ``t(S) = A``, and the profile gives it its latency only, so
that it takes the link's per-byte rate, which comes from the preferred op that
did grow. When no op grew, there is no rate to write and the fit fails.

The fit's quality decides whether the profile is written (:func:`judge_fits`):
an op that grew with size and whose line explains less than ``--fit-min-r2``
(default 0.5) of its times' variance is refused, and nothing is written; below
0.9 it is written with a warning. Times that scatter that much about a line come
from a busy host (a fit made at a load average of 12 had r² from −0.51 to 0.69
and predicted worse than the built-in model of its link). A flat op has no line
whose r² could be judged: its spread about its latency (the largest relative
error) is warned of when above 25%.

To calibrate the link between nodes, run one rank per node (``--nproc K
--nodes K --link RATE``): with several ranks per node the measured op also
contains the loopback part, which the model's hierarchical fabric charges to
the intra-node profile.

``sendrecv`` (a ring shift: every rank sends and receives S at once, as in
nccl-tests) is written as ``send`` and ``recv``; on gloo a shift between just
two ranks (each the other's only peer) runs at about half the one-way rate,
also in a bare loop, and the fit keeps that; with 4 ranks it reaches the link.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commlens.bench.runner import BenchReport
from commlens.bench.sizes import format_size
from commlens.errors import UsageError
from commlens.predict.cost import flat_time
from commlens.safefile import write_output
from commlens.units import plural

# The median is robust to the odd slow call of a busy machine.
TIME_KEY = "time_p50_s"
# Bench op → op names in a profile (sendrecv times one send+recv pair).
PROFILE_OPS = {"sendrecv": ("send", "recv")}


@dataclass(frozen=True)
class OpFit:
    """``t(S) = intercept_s + slope_s_per_byte·S`` for one op, and its quality."""

    op: str
    n: int
    intercept_s: float
    slope_s_per_byte: float
    r2: float
    max_rel_err: float
    points: int
    sizes: tuple[int, int] = (0, 0)
    """The smallest and the largest size fitted, bytes."""

    @property
    def flat(self) -> bool:
        """Whether the time did not grow with size over the sizes measured."""
        return self.slope_s_per_byte <= 0.0

    def predict(self, size_bytes: float) -> float:
        return self.intercept_s + self.slope_s_per_byte * size_bytes

    def model_alpha_beta(self) -> tuple[float, float]:
        """(alpha_s, beta_s_per_byte) for the model's ring formula of this op."""
        op = PROFILE_OPS.get(self.op, (self.op,))[0]
        steps = flat_time(op, 0.0, self.n, 1.0, 0.0, "ring")
        per_byte = flat_time(op, 1.0, self.n, 0.0, 1.0, "ring")
        return self.intercept_s / steps, self.slope_s_per_byte / per_byte


R2_MIN = 0.5
"""Below this r², an op's fit is refused (``--fit-min-r2``' default)."""
R2_WARN = 0.9
"""Below this r², an op's fit is written with a warning."""
FLAT_SPREAD_WARN = 0.25
"""A flat op whose times lie further than this from its latency is warned of."""


@dataclass(frozen=True)
class FitQuality:
    """What :func:`judge_fits` found: the ops refused and the ops warned of, one line each."""

    refused: list[str]
    warned: list[str]


def judge_fits(fits: list[OpFit], min_r2: float = R2_MIN) -> FitQuality:
    """The fits' quality against ``min_r2`` (refused below) and :data:`R2_WARN` (warned):
    r² for an op that grew with size, the spread about its latency for a flat one."""
    refused, warned = [], []
    for f in fits:
        if f.flat:
            if f.max_rel_err > FLAT_SPREAD_WARN:
                warned.append(
                    f"{f.op} is flat over its sizes and its times lie up to "
                    f"{f.max_rel_err:.0%} from its latency"
                )
        elif f.r2 < min_r2:
            refused.append(f"{f.op} r2 {f.r2:.2f} is below {min_r2:g}")
        elif f.r2 < R2_WARN:
            warned.append(f"{f.op} r2 {f.r2:.2f} is below {R2_WARN:g}")
    return FitQuality(refused, warned)


def fit_line(sizes: list[float], times: list[float]) -> tuple[float, float]:
    """(A, B) minimizing the relative error of ``A + B·S``, both at least 0.

    The constrained minimum lies on a bound when the free one does not: a
    negative latency refits the slope alone, a negative slope (times that fall
    as sizes grow: noise) the latency alone, ``B = 0``.
    """
    s, t = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    w = 1.0 / t
    (a, b), *_ = np.linalg.lstsq(np.column_stack([w, s * w]), np.ones_like(t), rcond=None)
    if a < 0:  # latency cannot be negative: slope only
        a, b = 0.0, float(np.sum(s * w) / np.sum((s * w) ** 2))
    elif b < 0:  # nor can the time per byte: latency only
        a, b = float(np.sum(w) / np.sum(w**2)), 0.0
    return float(a), float(b)


def fit_report(report: BenchReport, min_size: int = 0) -> list[OpFit]:
    """One fit per op with at least two correct sizes of at least ``min_size`` bytes."""
    if report.config.nproc < 2:
        raise UsageError("--fit needs at least 2 ranks (--nproc 2 or more)")
    fits = []
    for op in report.config.ops:
        rows = [
            r for r in report.measured if r["op"] == op and r["ok"] and r["size_bytes"] >= min_size
        ]
        if len({r["size_bytes"] for r in rows}) < 2:
            continue
        sizes = [float(r["size_bytes"]) for r in rows]
        times = [float(r[TIME_KEY]) for r in rows]
        a, b = fit_line(sizes, times)
        pred = np.array([a + b * x for x in sizes])
        obs = np.array(times)
        ss_tot = float(np.sum((obs - obs.mean()) ** 2))
        r2 = 1.0 - float(np.sum((obs - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
        rel = float(np.max(np.abs(pred - obs) / obs))
        span = (int(min(sizes)), int(max(sizes)))
        fits.append(OpFit(op, rows[0]["ranks"], a, b, r2, rel, len(rows), span))
    if not fits:
        raise UsageError("--fit needs at least two sizes of one op that ran correctly")
    return fits


def profile_dict(report: BenchReport, fits: list[OpFit], name: str) -> dict[str, Any]:
    """The profile as a dict, in the layout of :mod:`commlens.predict.profiles`."""
    cfg = report.config
    by_op = {f.op: f for f in fits}
    # Link figures: latency from the point-to-point fit when there is one; the
    # large-message rate from the op with the most bytes on the wire per byte.
    lat_fit = by_op.get("sendrecv") or by_op.get("all_reduce") or fits[0]
    bw_fit = _rate_fit(report, fits)
    alpha, _ = lat_fit.model_alpha_beta()
    _, beta = bw_fit.model_alpha_beta()
    effective_Gbps = 8.0 / beta / 1e9
    nominal = _link_Gbps(report)
    bandwidth = nominal if nominal else effective_Gbps
    ops: dict[str, Any] = {}
    for f in fits:
        a, b = f.model_alpha_beta()
        line = f"t = {f.intercept_s:.6g} s + {f.slope_s_per_byte:.6g} s/B x S"
        if f.flat:
            line = f"t = {f.intercept_s:.6g} s, flat over its sizes: the link's rate per byte"
        for op in PROFILE_OPS.get(f.op, (f.op,)):
            ops[op] = {"alpha_s": a} | ({} if f.flat else {"beta_s_per_byte": b})
            ops[op] |= {
                "r2": round(f.r2, 6),
                "max_rel_err": round(f.max_rel_err, 6),
                "points": f.points,
                "fit": line,
            }
    where = (
        f"{plural(cfg.nproc, 'rank')} on {plural(cfg.nodes, 'node')}, link {cfg.link or 'unshaped'}"
    )
    return {
        "name": name,
        "description": f"fitted by commlens bench on {where}",
        "scope": "inter" if cfg.nodes > 1 else "intra",
        "source": (
            f"commlens bench --fit, {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%MZ}, "
            f"{where}, backend {cfg.resolved_backend()}, {cfg.dtype}, {plural(cfg.iters, 'iter')}; "
            "ops: ring alpha per step, beta per wire byte"
        ),
        "link": {
            "latency_s": alpha,
            "bandwidth_Gbps": bandwidth,
            "efficiency": min(1.0, effective_Gbps / bandwidth),
        },
        "ops": ops,
    }


def _rate_fit(report: BenchReport, fits: list[OpFit]) -> OpFit:
    """The fit that gives the link its rate: all-reduce, else the shift, else the
    first op measured, whichever first grew with size."""
    order = ("all_reduce", "sendrecv", *report.config.ops)
    grew = [f for f in sorted(fits, key=lambda f: order.index(f.op)) if not f.flat]
    if not grew:
        low, high = min(f.sizes[0] for f in fits), max(f.sizes[1] for f in fits)
        raise UsageError(
            f"no op's time grew with its size from {format_size(low)} to {format_size(high)}: "
            "these sizes do not resolve the link's rate per byte"
        )
    return grew[0]


def _link_Gbps(report: BenchReport) -> float | None:
    topo = report.topology or {}
    bits = topo.get("link_bits_per_s")
    return float(bits) / 1e9 if bits else None


def write_profile(path: str | os.PathLike[str], profile: dict[str, Any]) -> Path:
    """Write ``profile`` as TOML, safely (see :mod:`commlens.safefile`)."""
    out = Path(path)
    lines = [f"{k} = {_toml(profile[k])}" for k in ("name", "description", "scope", "source")]
    lines += ["", "[link]"] + [f"{k} = {_toml(v)}" for k, v in profile["link"].items()]
    for op, table in profile["ops"].items():
        lines += ["", f"[ops.{op}]"] + [f"{k} = {_toml(v)}" for k, v in table.items()]
    write_output(out, "\n".join(lines) + "\n")
    return out


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if np.isfinite(value) else "inf"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
