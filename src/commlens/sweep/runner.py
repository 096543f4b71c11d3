"""Run a sweep: each point a `commlens run` in its own directory, resumable.

A point is finished when its ``point.json`` says ``ok`` (measured) or
``skipped`` (impossible, with the reason); a new start skips those (only the
model's predictions at the studies' scale are recomputed, from the file's
current ``[scale]``) and runs
the rest again, failed points included (a failure may be transient; its
error stays in the catalog until the point succeeds). A point's run
directory without ``point.json`` is what an interrupted start left: it is
removed and the point run again. One sweep at a time per directory (a lock).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.safefile import check_within, make_dir, open_lock, open_own, write_output
from commlens.sweep.catalog import (
    POINT_FILE,
    SPEC_FILE,
    is_sweep_dir,
    point_dir,
    read_point,
    write_catalog,
    write_json,
)
from commlens.sweep.grid import Point, expand
from commlens.sweep.spec import SweepSpec
from commlens.trace.rundir import remove_run_dir

INTERRUPT_GRACE_S = 30.0
"""How long an interrupted point may take to tear down (ranks, emulated links)."""


@dataclass
class SweepOutcome:
    """What one start of a sweep did."""

    path: Path
    points: list[Point]
    ran: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


Listener = Callable[[str, Point, dict[str, Any] | None], None]
"""Called with ("start" | "done", point, record) around each point."""


def prepare(spec: SweepSpec, out: Path) -> list[Point]:
    """Check the grid and the output directory; write the sweep file there."""
    points = expand(spec)
    if any(p.emulated and not p.skip_reason for p in points) and os.geteuid() != 0:
        raise UsageError(
            f"{spec.path or 'sweep'}: points on emulated nodes (nodes > 1) need root; "
            "run as root or set nodes = 1"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not is_sweep_dir(out):
        raise UsageError(f"{out} is not empty and not a sweep directory; pick another --out")
    make_dir(out / "points")
    write_output(out / SPEC_FILE, spec.source, within=out)
    return points


@contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    lock = check_within(out / ".lock", out)
    try:
        fh = os.fdopen(open_lock(lock), "r+b")
    except OSError as exc:
        raise UsageError(f"{lock}: cannot open ({exc.strerror or exc})") from None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{out}: another commlens sweep is running there") from None
        yield


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the point's `commlens run` gets SIGTERM if the sweep dies (even SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _last_error(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if "error" in line.lower():
            return line
    return lines[-1] if lines else ""


def run_point(point: Point, spec: SweepSpec, pdir: Path) -> tuple[str, str]:
    """Run one point into ``pdir/run``; (status, error).

    What an earlier, interrupted start left there is removed first (commlens's
    own files only; anything else is refused)."""
    run_dir = pdir / "run"
    check_within(run_dir, pdir)
    if run_dir.is_dir():
        try:
            remove_run_dir(run_dir, "point run", require_manifest=False)
        except OSError as exc:
            raise UsageError(f"{run_dir}: cannot remove ({exc.strerror or exc})") from None
    s = spec.settings
    argv = [sys.executable, "-m", "commlens", "run"]
    argv += point.run_args(str(run_dir), s.steps, s.warmup_steps, s.seed)
    env = dict(os.environ, COLUMNS="120", PYTHONUNBUFFERED="1")
    log = check_within(pdir / "run.log", pdir)
    with os.fdopen(open_own(log), "w") as fh:  # never through a planted link
        fh.write("$ commlens run " + " ".join(argv[4:]) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent
        )
        try:
            code = proc.wait(timeout=s.timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return "failed", f"timed out after {s.timeout_s:g} s"
        except BaseException:
            _stop(proc)
            raise
    if code != 0:
        return "failed", _last_error(log) or f"commlens run exited with code {code}"
    return "ok", ""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Interrupt the point's run (it tears its ranks and links down), then kill it.

    SIGINT first (Ctrl-C), SIGTERM if it ignores that (a background job does),
    SIGKILL last; its emulated nodes then go with its reaper."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=INTERRUPT_GRACE_S / 2)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def measure(point: Point, spec: SweepSpec, pdir: Path) -> dict[str, Any]:
    """The figures of a finished point (collect + validate + predict)."""
    from commlens.sweep.collect import collect

    s = spec.settings
    link = point.link if point.emulated and point.shaped else None
    result = collect(pdir / "run", s.tolerance, list(s.networks), point.nodes, link)
    if not s.validate:
        result.validation = {}
    return result.to_dict()


def _record(point: Point, status: str, error: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "id": point.id,
        "status": status,
        "error": error,
        "config": point.config(),
        "network": point.network,
        **extra,
    }


def _scale_rows(point: Point, spec: SweepSpec) -> list[dict[str, Any]]:
    if spec.scale is None:
        return []
    from commlens.sweep.check import predict_scale

    try:
        return predict_scale(point.config(), spec.scale)
    except UsageError:
        return []


def run_sweep(
    spec: SweepSpec, out: Path, listener: Listener | None = None, recollect: bool = False
) -> SweepOutcome:
    """Run every unfinished point of ``spec`` into ``out``; rewrite the catalog as it goes.

    With ``recollect``, finished points are measured again from their runs (after an
    analysis change) instead of being taken from their ``point.json``."""
    points = prepare(spec, out)
    outcome = SweepOutcome(out, points)
    networks = list(spec.settings.networks)
    records: dict[str, dict[str, Any]] = {}
    for p in points:
        rec = read_point(out, p.id)
        if rec is not None and rec["status"] in ("ok", "skipped"):
            if rec["status"] == "ok":  # the model is cheap: follow the file's [scale]
                rec["scale_predictions"] = _scale_rows(p, spec)
            records[p.id] = rec
        else:
            records[p.id] = _record(p, "pending", (rec or {}).get("error", ""))
    with sweep_lock(out):
        for point in points:
            pdir = point_dir(out, point.id)
            if records[point.id]["status"] in ("ok", "skipped"):
                outcome.reused.append(point.id)
                if recollect and records[point.id]["status"] == "ok":
                    records[point.id]["result"] = measure(point, spec, pdir)
                    write_json(pdir / POINT_FILE, records[point.id])
                continue
            make_dir(pdir, within=out / "points")
            if point.skip_reason:
                rec = _record(point, "skipped", point.skip_reason)
                outcome.skipped.append(point.id)
            else:
                if listener:
                    listener("start", point, None)
                t0 = time.monotonic()
                status, error = run_point(point, spec, pdir)
                extra: dict[str, Any] = {"wall_s": time.monotonic() - t0}
                if status == "ok":
                    try:
                        extra["result"] = measure(point, spec, pdir)
                    except Exception as exc:  # a damaged run must not stop the sweep
                        status, error = "failed", f"analysis failed: {exc}"
                extra["scale_predictions"] = _scale_rows(point, spec)
                rec = _record(point, status, error, **extra)
                (outcome.ran if status == "ok" else outcome.failed).append(point.id)
            write_json(pdir / POINT_FILE, rec)
            records[point.id] = rec
            write_catalog(out, [records[p.id] for p in points], networks)
            if listener:
                listener("done", point, rec)
        outcome.records = [records[p.id] for p in points]
        write_catalog(out, outcome.records, networks)
    return outcome
