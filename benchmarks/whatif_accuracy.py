"""Benchmark: how close ``commlens whatif`` comes to runs measured on other links.

    .venv/bin/python benchmarks/whatif_accuracy.py [--quick] [--out DIR] [--reuse]
        [--model gpt-tiny] [--steps 6] [--capture 50mbit] [--links 20mbit,unshaped]
        [--fit-links]

Needs root (network namespaces). For each scheme (dp, zero3, tp, pp 1f1b, 3d)
on 4 ranks over 2 emulated nodes it runs ``commlens run --nproc 4 --nodes 2
--link RATE`` on the capture link and on every other link (the third-party
scripts ``ddp-script`` and ``fsdp2-script``, named in ``--schemes``: ``commlens
trace --nproc 4 --nodes 2 --link RATE -- python examples/SCRIPT STEPS``), then replays the
capture for all of them with ``whatif`` (default calibration: the run's
recorded link rate plus per-op CPU terms fitted from the run itself; the
unshaped link, whose rate depends on the host's CPU and load, gets the
profile ``commlens bench --fit`` measures on it just before its first run,
unless ``--no-fit``; with ``--fit-links`` every emulated link, the capture
link included, gets the profile ``bench --fit`` measures on it too, once per
link, kept in ``--out`` as ``LINK-fit.toml``, the capture replayed with
``--profile`` of its own link's) and prints, per (scheme, link), the predicted and
measured median step times and the error; then the schemes ordered by link
sensitivity (slowest link's step over the fastest's), predicted and measured.
The self-replay row is the capture predicted on its own link. With ``--repeats N``
every run is made N times and every capture-link run is replayed (a row per
capture); the sensitivity order is then also checked pair by pair, for the pairs
of schemes whose ratios over the repeats do not overlap.

The default links are slow so that gpt-tiny's messages (a 564 KB gradient
all-reduce for dp) keep the link busy: the shaper lets its bucket (4 ms of the rate,
500 KB at 1 Gbit/s; the manifest's ``burst_bytes``) through at full speed
after the link was idle; the replay credits it once per op, but on a link
whose bucket holds most of an op (gpt-tiny at 1 Gbit/s) the measured step
hardly depends on the rate and the bucket's state decides it.

``--quick`` runs 4 steps of each (about 8 minutes on a loaded 2-core host;
its median of 3 steps moves by several percent from run to run: the default
6 steps are steadier); on a loaded host the unshaped link's steps vary most
(CPU-bound), so each capture line gives the load average it ran at;
``--reuse`` keeps runs already in ``--out`` (re-analysis only).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMES: dict[str, list[str]] = {
    "dp": ["--scheme", "dp"],
    "zero3": ["--scheme", "zero3"],
    "tp": ["--scheme", "tp", "--tp", "4"],
    "pp": ["--scheme", "pp", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b"],
    "3d": ["--scheme", "3d", "--tp", "2", "--pp", "2", "--microbatches", "2"],
}
SCRIPTS: dict[str, str] = {
    "ddp-script": "examples/ddp_train.py",
    "fsdp2-script": "examples/fsdp2_train.py",
}
"""Third-party jobs, traced (``commlens trace --nproc 4 --nodes 2``), not run: plain
DDP and FSDP2 scripts that know nothing of commlens, given the step count."""
UNSHAPED = "unshaped"


@dataclass(frozen=True)
class Row:
    """One (scheme, link, capture): the step ``whatif`` predicts from the capture link's
    run ``capture`` (0-based), and the measured step of every run on the link (seconds,
    median over the kept steps; on the capture link run ``capture`` is the capture)."""

    scheme: str
    link: str
    guess_s: float
    runs_s: list[float]
    capture: int = 0


def capture(
    out: Path, model: str, scheme: str, link: str, steps: int, reuse: bool, repeat: int = 1
) -> Path:
    """Run ``scheme`` on ``link`` into ``out/scheme-link`` (``scheme-link-rN`` for the
    N-th repeat; kept with ``reuse``)."""
    run = out / (f"{scheme}-{link}" if repeat == 1 else f"{scheme}-{link}-r{repeat}")
    if reuse and (run / "run.json").exists():
        return run
    shaped = [] if link == UNSHAPED else ["--link", link]
    if scheme in SCRIPTS:
        cmd = [sys.executable, "-m", "commlens", "trace", "--nproc", "4", "--nodes", "2"]
        cmd += ["--out", str(run), "--force", *shaped, "--", sys.executable, SCRIPTS[scheme]]
        cmd.append(str(steps))
    else:
        cmd = [sys.executable, "-m", "commlens", "run", "--model", model, "--nproc", "4"]
        cmd += ["--nodes", "2", "--steps", str(steps), "--out", str(run), "--force"]
        cmd += SCHEMES[scheme] + shaped
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    load = os.getloadavg()[0]
    print(f"  captured {run.name} in {time.perf_counter() - t:.0f} s (load {load:.1f})", flush=True)
    return run


def fit_profile(out: Path, stem: str, link: str, reuse: bool) -> str:
    """``commlens bench --fit`` on 4 ranks over 2 nodes joined by ``link`` into
    ``out/STEM-fit.toml``: the profile of a link whose rate is not known (unshaped
    veth: CPU-bound, so it depends on the host and its load), measured right before
    the runs on it, or (``--fit-links``) of an emulated link (sizes from 64 KB when
    all sizes give no line). Its path, or ``link`` itself (the built-in model of it)
    when the fit fails (noise on a loaded host; ``STEM-fit.failed`` says why, and
    ``--reuse`` keeps the failure rather than fitting again at another time)."""
    path = out / f"{stem}-fit.toml"
    failed = out / f"{stem}-fit.failed"  # a fit that failed stays failed under --reuse
    if reuse and path.exists():
        return str(path)
    if reuse and failed.exists():
        return link
    cmd = [sys.executable, "-m", "commlens", "bench", "--nproc", "4", "--nodes", "2"]
    cmd += ["--ops", "all_reduce,all_gather,broadcast,sendrecv", "--sizes", "4K:1M:4"]
    cmd += ["-w", "3", "-n", "20", "--fit", str(path), "--fit-name", link]
    cmd += [] if link == UNSHAPED else ["--link", link]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:  # small sizes too noisy for a line: fit the larger ones
        cmd += ["--fit-min-size", "64K"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    load = os.getloadavg()[0]
    if proc.returncode:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
        print(f"  no fit for {link} (load average {load:.1f}): {why}", flush=True)
        failed.write_text(why + "\n")
        return link
    print(f"  fitted {path.name} (load average {load:.1f})", flush=True)
    return str(path)


def measured_step(run: Path) -> float:
    """Median over the steps after the first of the slowest rank's step time, seconds."""
    from commlens.whatif.source import read_trace
    from commlens.whatif.study import kept_steps

    trace = read_trace(run)
    keep = kept_steps(trace, None)
    times = []
    for s in keep:
        rows = trace.step_index == s
        times.append(float((trace.step_end[rows] - trace.step_start[rows]).max()) / 1e9)
    return float(np.median(times))


def predicted(
    run: Path, links: list[str], nets: dict[str, str], op_times: str, own: str | None
) -> dict[str, float]:
    """Median step time ``whatif`` predicts for ``run`` on each link (``--net nets[link]``;
    ``--profile own`` where given), seconds."""
    from commlens.whatif.study import run_study

    spec = ",".join(nets.get(link, link) for link in links)
    study = run_study(run, spec, op_times=op_times, captured_net=own)
    return {link: a.figures.median_step_s for link, a in zip(links, study.answers, strict=True)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 steps per run")
    parser.add_argument("--out", type=Path, default=Path("runs/whatif-accuracy"))
    parser.add_argument("--reuse", action="store_true", help="keep runs already in --out")
    parser.add_argument("--model", default="gpt-tiny")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--capture", default="50mbit")
    parser.add_argument("--links", default=f"20mbit,{UNSHAPED}")
    parser.add_argument(
        "--schemes",
        default=",".join(SCHEMES),
        help=f"built-in schemes of --model ({', '.join(SCHEMES)}) and traced scripts "
        f"({', '.join(SCRIPTS)})",
    )
    parser.add_argument("--op-times", default="fit,delta", help="whatif --op-times modes")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every (scheme, link) this many times, one after the other: every "
        "capture-link run is replayed for every link, its prediction scored against "
        "the mean of the link's runs and against each, and the runs' spread is the "
        "host's noise floor",
    )
    parser.add_argument(
        "--no-fit",
        action="store_true",
        help="predict the unshaped link with the loopback profile, not one bench --fit measured",
    )
    parser.add_argument(
        "--fit-links",
        action="store_true",
        help="predict every emulated link (and calibrate on the capture link) with the "
        "profile bench --fit measures on it, not its nominal rate",
    )
    args = parser.parse_args()
    steps = 4 if args.quick else args.steps
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    schemes = [s for s in args.schemes.split(",") if s]
    unknown = [s for s in schemes if s not in SCHEMES and s not in SCRIPTS]
    if unknown:
        parser.error(f"unknown scheme {unknown[0]!r}: one of {', '.join([*SCHEMES, *SCRIPTS])}")
    others = [x for x in args.links.split(",") if x and x != args.capture]
    links = [args.capture, *others]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    modes = [m for m in args.op_times.split(",") if m]
    found: dict[str, list[Row]] = {m: [] for m in modes}
    nets: dict[str, str] = {}
    if args.fit_links:
        for link in (x for x in links if x != UNSHAPED):
            nets[link] = fit_profile(args.out, link, link, args.reuse)
    own = nets.get(args.capture)
    for scheme in schemes:
        runs: dict[str, list[Path]] = {link: [] for link in links}
        for repeat in range(1, args.repeats + 1):
            for link in links:
                if link == UNSHAPED and not args.no_fit and repeat == 1:
                    nets[link] = fit_profile(args.out, f"{scheme}-{link}", link, args.reuse)
                run = capture(args.out, args.model, scheme, link, steps, args.reuse, repeat)
                runs[link].append(run)
        real = {link: [measured_step(r) for r in runs[link]] for link in links}
        for mode in modes:
            for k, run in enumerate(runs[args.capture]):
                guess = predicted(run, links, nets, mode, own)
                found[mode] += [Row(scheme, link, guess[link], real[link], k) for link in links]
    for mode in modes:
        report(found[mode], mode, schemes, links, args, steps)
    print(f"took {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}")
    return 0


def report(
    rows: list[Row],
    mode: str,
    schemes: list[str],
    links: list[str],
    args: argparse.Namespace,
    steps: int,
) -> None:
    """Print the table of one --op-times mode."""
    print(
        f"\nwhatif accuracy: {args.model}, 4 ranks on 2 emulated nodes, captured at "
        f"{args.capture}, {steps} steps (median of steps after the first), "
        f"--op-times {mode}{', profiles fitted on every link' if args.fit_links else ''}"
    )
    many = args.repeats > 1
    head = f"{'scheme':12s} {'link':10s} {'predicted':>10s} {'measured':>10s} {'error':>8s}"
    print(head + (f"  {'runs (ms)':>20s} {'spread':>7s} {'error per run':>17s}" if many else ""))
    errors: dict[str, list[float]] = {"self": [], "cross": []}
    for row in rows:
        own = row.link == args.capture
        real_s = row.runs_s[row.capture] if own else float(np.mean(row.runs_s))
        err = row.guess_s / real_s - 1.0
        errors["self" if own else "cross"].append(abs(err))
        line = (
            f"{row.scheme:12s} {row.link:10s} {row.guess_s * 1e3:8.1f}ms {real_s * 1e3:8.1f}ms "
            f"{err:+7.1%}"
        )
        if many:
            each = [row.guess_s / r - 1.0 for r in row.runs_s]
            runs = ", ".join(f"{r * 1e3:.1f}" for r in row.runs_s)
            spread = max(row.runs_s) / min(row.runs_s) - 1.0
            line += f"  {runs:>20s} {spread:7.1%} {min(each):+7.1%} to {max(each):+7.1%}"
        if many:
            line += f"  from capture {row.capture + 1}"
        print(line + (" (self)" if own else ""))
    for kind, errs in errors.items():
        if errs:
            print(f"{kind}-replay: mean |error| {np.mean(errs):.1%}, max {max(errs):.1%}")
    if many:
        spreads = [max(r.runs_s) / min(r.runs_s) - 1.0 for r in rows if r.capture == 0]
        print(
            f"repeated runs of one (scheme, link): spread mean {np.mean(spreads):.1%}, "
            f"max {max(spreads):.1%} (the host's noise floor)"
        )
    slow, fast = _extremes(links)
    sens = {
        which: sorted(schemes, key=lambda s: -_ratio(rows, s, slow, fast, which == "predicted"))
        for which in ("predicted", "measured")
    }
    for which, order in sens.items():
        ratios = ", ".join(
            f"{s} {_ratio(rows, s, slow, fast, which == 'predicted'):.2f}x" for s in order
        )
        print(f"sensitivity ({slow} over {fast}), {which}: {ratios}")
    print(f"ordering {'the same' if sens['predicted'] == sens['measured'] else 'DIFFERS'}")
    if many:
        _pairwise_order(rows, schemes, slow, fast)


def _ratio_range(rows: list[Row], scheme: str, slow: str, fast: str) -> tuple[float, float]:
    """The least and the most ``slow`` over ``fast`` any two of the scheme's runs give."""
    by = {r.link: r.runs_s for r in rows if r.scheme == scheme and r.capture == 0}
    return min(by[slow]) / max(by[fast]), max(by[slow]) / min(by[fast])


def _pairwise_order(rows: list[Row], schemes: list[str], slow: str, fast: str) -> None:
    """Print whether the prediction orders every two schemes as the runs do, for the
    pairs the runs tell apart: one scheme's least ratio above the other's most."""
    told, wrong = 0, []
    for a, b in itertools.combinations(schemes, 2):
        (a_lo, a_hi), (b_lo, b_hi) = (_ratio_range(rows, s, slow, fast) for s in (a, b))
        if a_lo <= b_hi and b_lo <= a_hi:
            continue  # the runs' ranges overlap: the host's noise cannot order them
        told += 1
        more, less = (a, b) if a_lo > b_hi else (b, a)
        if _ratio(rows, more, slow, fast, True) <= _ratio(rows, less, slow, fast, True):
            wrong.append(f"{more} over {less}")
    pairs = len(schemes) * (len(schemes) - 1) // 2
    verdict = f"DIFFERS ({', '.join(wrong)})" if wrong else "the same"
    print(
        f"ordering of the {told} of {pairs} pairs the runs tell apart (their ratios' "
        f"ranges over the repeats apart): {verdict}"
    )


def _extremes(links: list[str]) -> tuple[str, str]:
    """(slowest, fastest) of the links; unshaped is the fastest."""
    from commlens.netem.rate import parse_rate

    def rate(link: str) -> float:
        return float("inf") if link == UNSHAPED else parse_rate(link)

    ordered = sorted(links, key=rate)
    return ordered[0], ordered[-1]


def _ratio(rows: list[Row], scheme: str, slow: str, fast: str, guess: bool) -> float:
    """Step time on ``slow`` over ``fast`` for ``scheme``, predicted (the mean over the
    captures) or measured (the mean over the runs)."""
    by: dict[str, list[float]] = {}
    for r in (r for r in rows if r.scheme == scheme):
        by.setdefault(r.link, []).append(r.guess_s if guess else float(np.mean(r.runs_s)))
    return float(np.mean(by[slow]) / np.mean(by[fast]))


if __name__ == "__main__":
    sys.exit(main())
