"""Expand a sweep spec into points, check each, and turn one into `commlens run` flags.

A point that cannot run (tp not dividing the heads, a pipeline deeper than
the model, a link on one node, T5 under pp, a model too large for the host)
is kept in the grid as *skipped* with the reason, so one impossible corner
does not stop a sweep; a grid where nothing can run is an error.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from commlens.errors import UsageError
from commlens.sweep.spec import POINT_KEYS, SweepSpec

UNSHAPED = ("unshaped", "none", "")

_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")
_LONE_DOT = re.compile(r"(?<![A-Za-z0-9])\.|\.(?![A-Za-z0-9])")
MAX_ID = 120


def safe_name(raw: str) -> str:
    """``raw`` as one safe path component: letters, digits, ``_+-`` and dots between
    them (so never ``..`` nor a leading dot). A name that had to change, or that
    was too long, ends in a short hash of ``raw``, so different texts stay apart."""
    name = _LONE_DOT.sub("-", _UNSAFE.sub("-", raw))
    if name == raw and 0 < len(name) <= MAX_ID:
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{name[: MAX_ID - 9]}-{digest}"


@dataclass(frozen=True)
class Point:
    """One run of the sweep: every point key resolved."""

    model: str
    scheme: str
    nproc: int
    dp: int | None
    tp: int | None
    pp: int | None
    seq_len: int
    micro_batch: int
    microbatches: int
    nodes: int
    link: str
    """A rate like ``500mbit``, or ``unshaped`` (emulated nodes without shaping)."""
    dtype: str = "fp32"
    schedule: str = "1f1b"
    sequence_parallel: bool = False
    recompute: bool = False
    layout: tuple[int, int, int] = (0, 0, 0)
    """(dp, tp, pp) as resolved for the scheme (filled by :func:`check_point`)."""
    skip_reason: str = field(default="", compare=False)
    """Why the point cannot run ('' when it can)."""

    @property
    def shaped(self) -> bool:
        return self.link.lower() not in UNSHAPED

    @property
    def emulated(self) -> bool:
        """Runs on emulated nodes (needs root)."""
        return self.nodes > 1

    @property
    def network(self) -> str:
        """How the ranks talk: ``loopback`` or ``2 nodes, 500mbit``."""
        if not self.emulated:
            return "loopback"
        return f"{self.nodes} nodes, {self.link if self.shaped else 'unshaped'}"

    @property
    def id(self) -> str:
        """A readable, unique name, also the point's directory name (a safe one:
        see :func:`safe_name`)."""
        d, t, p = self.layout if self.layout != (0, 0, 0) else (self.dp, self.tp, self.pp)
        deg = "-".join(
            f"{n}{'x' if v is None else v}"
            for n, v in zip(("dp", "tp", "pp"), (d, t, p), strict=True)
        )
        parts = [self.model, self.scheme, deg, f"s{self.seq_len}"]
        parts += [f"b{self.micro_batch}", f"k{self.microbatches}"]
        parts.append("loopback" if not self.emulated else f"{self.nodes}n-{self.link_label}")
        if self.dtype != "fp32":
            parts.append(self.dtype)
        if self.schedule != "1f1b":
            parts.append(self.schedule)
        if self.sequence_parallel:
            parts.append("sp")
        if self.recompute:
            parts.append("recompute")
        return safe_name("_".join(str(x) for x in parts))

    @property
    def link_label(self) -> str:
        return self.link.lower() if self.shaped else "unshaped"

    def config(self) -> dict[str, Any]:
        """The point's settings, flat (catalog columns)."""
        d, t, p = self.layout
        return {
            "model": self.model,
            "scheme": self.scheme,
            "nproc": self.nproc,
            "dp": d,
            "tp": t,
            "pp": p,
            "seq_len": self.seq_len,
            "micro_batch": self.micro_batch,
            "microbatches": self.microbatches,
            "nodes": self.nodes,
            "link": self.link_label if self.emulated else "loopback",
            "dtype": self.dtype,
            "schedule": self.schedule,
            "sequence_parallel": self.sequence_parallel,
            "recompute": self.recompute,
        }

    def run_args(self, out: str, steps: int, warmup_steps: int, seed: int) -> list[str]:
        """The `commlens run` arguments of this point."""
        args = ["--model", self.model, "--scheme", self.scheme, "--nproc", str(self.nproc)]
        for flag in ("dp", "tp", "pp"):
            value = getattr(self, flag)
            if value is not None:
                args += [f"--{flag}", str(value)]
        args += ["--seq-len", str(self.seq_len), "--micro-batch", str(self.micro_batch)]
        args += ["--microbatches", str(self.microbatches), "--dtype", self.dtype]
        args += ["--schedule", self.schedule, "--steps", str(steps)]
        args += ["--warmup-steps", str(warmup_steps), "--seed", str(seed)]
        if self.sequence_parallel:
            args.append("--sequence-parallel")
        if self.recompute:
            args.append("--recompute")
        if self.emulated:
            args += ["--nodes", str(self.nodes)]
            if self.shaped:
                args += ["--link", self.link]
        return [*args, "--out", out]


def check_point(point: Point, steps: int = 4, warmup_steps: int = 1) -> Point:
    """The point with its layout resolved, or with ``skip_reason`` set."""
    from commlens.netem.rate import parse_rate
    from commlens.workloads.config import workload_from_options
    from commlens.workloads.fit import check_fits

    try:
        if point.shaped and not point.emulated:
            raise UsageError(f"link {point.link} needs nodes >= 2 (one node has no link)")
        if point.nproc % point.nodes:
            raise UsageError(f"{point.nproc} ranks do not split over {point.nodes} nodes")
        if point.shaped:
            parse_rate(point.link)
        ns = argparse.Namespace(
            **{k: getattr(point, k) for k in POINT_KEYS},
            steps=steps,
            warmup_steps=warmup_steps,
            seed=1234,
            lr=1e-3,
            backend="gloo",
        )
        wcfg = workload_from_options(ns)
        if wcfg.model.arch == "t5" and wcfg.dims.pp > 1:
            raise UsageError("T5 is not built for pipeline parallelism")
        check_fits(wcfg)
    except UsageError as exc:
        return _replace(point, skip_reason=str(exc))
    d = wcfg.dims
    return _replace(point, layout=(d.dp, d.tp, d.pp))


def _replace(point: Point, **changes: Any) -> Point:
    import dataclasses

    return dataclasses.replace(point, **changes)


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the grid in file order (duplicates once), each checked."""
    keys = list(spec.grid)
    seen: dict[str, Point] = {}
    for values in itertools.product(*(spec.grid[k] for k in keys)):
        merged = dict(spec.defaults)
        merged.update(zip(keys, values, strict=True))
        merged.update(spec.schemes.get(str(merged["scheme"]), {}))
        point = check_point(
            Point(**{k: merged[k] for k in POINT_KEYS}),
            spec.settings.steps,
            spec.settings.warmup_steps,
        )
        seen.setdefault(point.id, point)
    points = list(seen.values())
    unknown = set(spec.schemes) - {p.scheme for p in points}
    if unknown:
        raise UsageError(f"{spec.path or 'sweep'}: [schemes.{sorted(unknown)[0]}] matches no point")
    if points and all(p.skip_reason for p in points):
        raise UsageError(f"{spec.path or 'sweep'}: no point can run ({points[0].skip_reason})")
    return points
