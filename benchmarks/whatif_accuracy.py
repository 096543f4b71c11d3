"""Benchmark: how close `commlens whatif` comes to measured runs, beside the host's noise.

    .venv/bin/python benchmarks/whatif_accuracy.py [--set main,scale,fsdp2] [--windows N]
        [--quick] [--out DIR] [--real JOB] [--first-window K] [--fit-unshaped]

Needs root (network namespaces). Drives commlens through its command line only
(``trace``, ``run``, ``whatif --format json``, ``bench --fit``).

``main`` (a window of about 10 minutes on an idle 2-core host): three jobs on 4
ranks over 2 emulated nodes, captured at 1 Gbit/s and predicted for 200 Mbit/s
and the unshaped link:

- ``ddp-sleep`` and ``pp-sleep`` (``benchmarks/accuracy_job.py``): compute that
  sleeps instead of using the CPU, DDP's buckets overlapped with it and a
  blocking metric all-reduce; the pipeline variant's send/recv on the critical
  path;
- one real job, rotating over the windows through the built-in schemes of
  gpt-tiny and the example scripts (``--real`` picks one).

The runs are interleaved (each repeat runs every link, each link every job),
three times, with the load average logged per run. Each capture's prediction
and the mean of the captures' predictions are scored against the mean of the
link's runs, with the noise floor (one repeated run predicting the others) and
the runs' coefficient of variation beside them, then the predicted and
measured sensitivity (200 Mbit/s over unshaped). A window is void, counted and
run again (``--max-void`` times), not scored, when a controlled job's runs vary
by more than 5% (cv) on any link; a real job's cell is judged only where twice
its noise (the larger cv of its link's runs and of the captures) is within
10%, else printed as "host noise too large".

``scale``: ``ddp-sleep`` and gpt-tiny's ``zero3`` captured on 2 ranks (one per
node, 1 Gbit/s), predicted with ``whatif --dp 4 --ranks-per-node 2`` (ranks 0, 1
on one node, their copies 2, 3 on the other)
against runs on 4 ranks over 2 nodes; and those 4-rank runs predicted with
``--nodes 4 --ranks-per-node 1`` against runs on 4 nodes.

``fsdp2``: ``examples/fsdp2_train.py`` (plain ``fully_shard``) on 2 ranks over
2 nodes, captured unshaped and predicted for 200 Mbit/s against runs there:
within 10%, and never faster than the capture's own-link replay.

Steps are medians over the steps after the first (``whatif --steps 1:``; the
measured step of every run is the ``captured`` figure of its own ``whatif``
answer). ``--quick``: 6 steps, 2 repeats, one window.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy_table import Cell, Window, cv, mean, table

CAPTURE, SLOW, FAST = "1gbit", "200mbit", "unshaped"
LINKS = (CAPTURE, SLOW, FAST)
JOB = "benchmarks/accuracy_job.py"
CONTROLLED: dict[str, list[str]] = {"ddp-sleep": [JOB, "ddp"], "pp-sleep": [JOB, "pp"]}
BUILTIN: dict[str, list[str]] = {
    "dp": ["--scheme", "dp"],
    "zero3": ["--scheme", "zero3"],
    "tp": ["--scheme", "tp", "--tp", "4"],
    "pp": ["--scheme", "pp", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b"],
    "3d": ["--scheme", "3d", "--tp", "2", "--pp", "2", "--microbatches", "2"],
}
SCRIPTS: dict[str, list[str]] = {
    "ddp-script": ["examples/ddp_train.py"],
    "fsdp2-script": ["examples/fsdp2_train.py"],
}
REAL = ["dp", "ddp-script", "zero3", "fsdp2-script", "pp", "tp", "3d"]
"""The real jobs in the order the windows rotate through them."""
SETS = ("main", "scale", "fsdp2")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Options:
    sets: list[str]
    windows: int
    first_window: int
    steps: int
    repeats: int
    max_void: int
    real: str | None
    out: Path
    fit_unshaped: bool
    reuse: bool = False


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """The options, checked (a usage error names the bad one)."""
    doc = __doc__ or ""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--set", default="main", help=f"comma list of {', '.join(SETS)}")
    p.add_argument("--windows", type=int, default=1, help="scored windows of the main set")
    p.add_argument(
        "--first-window",
        type=int,
        default=1,
        help="number of the first window (the real job rotates with it)",
    )
    p.add_argument("--steps", type=int, default=12, help="steps per run (default 12)")
    p.add_argument("--repeats", type=int, default=3, help="runs per (job, link) (default 3)")
    p.add_argument("--max-void", type=int, default=2, help="void windows rerun at most")
    p.add_argument("--real", default=None, help=f"the real job: one of {', '.join(REAL)}")
    p.add_argument("--out", type=Path, default=Path("runs/whatif-accuracy"))
    p.add_argument(
        "--fit-unshaped",
        action="store_true",
        help="predict the unshaped link with a profile `bench --fit` measures on it at the "
        "start of each window (the built-in model of it when the fit is refused as poor)",
    )
    p.add_argument("--quick", action="store_true", help="6 steps, 2 repeats, one window")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep the runs already in --out (scoring again, e.g. on newer whatif code)",
    )
    a = p.parse_args(argv)
    sets = [s for s in a.set.split(",") if s]
    bad = [s for s in sets if s not in SETS]
    if bad or not sets:
        p.error(f"--set: unknown set {bad[0] if bad else a.set!r}; one of {', '.join(SETS)}")
    if a.real is not None and a.real not in REAL:
        p.error(f"--real: unknown job {a.real!r}; one of {', '.join(REAL)}")
    steps, repeats, windows = (6, 2, 1) if a.quick else (a.steps, a.repeats, a.windows)
    for name, value, least in (
        ("--steps", steps, 3),
        ("--repeats", repeats, 2),
        ("--windows", windows, 1),
        ("--first-window", a.first_window, 1),
        ("--max-void", a.max_void, 0),
    ):
        if value < least:
            p.error(f"{name} must be at least {least}, got {value}")
    return Options(
        sets,
        windows,
        a.first_window,
        steps,
        repeats,
        a.max_void,
        a.real,
        a.out.resolve(),
        a.fit_unshaped,
        a.reuse,
    )


def real_job(opts: Options, window: int) -> str:
    """The window's real job: ``--real``, else the rotation's."""
    return opts.real or REAL[(window - 1) % len(REAL)]


def job_command(job: str, out: Path, link: str, steps: int, nproc: int, nodes: int) -> list[str]:
    """The commlens command that runs ``job`` into ``out``."""
    cl = [sys.executable, "-m", "commlens"]
    shaped = [] if link == FAST else ["--link", link]
    where = ["--nproc", str(nproc), "--nodes", str(nodes), *shaped, "--out", str(out), "--force"]
    if job in BUILTIN:
        return [*cl, "run", "--model", "gpt-tiny", *BUILTIN[job], *where, "--steps", str(steps)]
    script = CONTROLLED.get(job) or SCRIPTS[job]
    return [*cl, "trace", *where, "--", sys.executable, *script, str(steps)]


@dataclass(frozen=True)
class Run:
    job: str
    link: str
    path: Path
    load: float


def launch(
    job: str, out: Path, link: str, steps: int, nproc: int = 4, nodes: int = 2, reuse: bool = False
) -> Run:
    """Run ``job`` once (a second try if it fails), logging its time and load average
    (kept beside the run as ``RUN.load``; with ``reuse``, a run made before is kept)."""
    load_file = out.parent / f"{out.name}.load"
    if reuse and (out / "run.json").is_file():  # its load unknown (nan) if not kept
        load = float(load_file.read_text()) if load_file.is_file() else float("nan")
        return Run(job, link, out, load)
    cmd = job_command(job, out, link, steps, nproc, nodes)
    for attempt in (1, 2):
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
        load = os.getloadavg()[0]
        if proc.returncode == 0:
            load_file.write_text(f"{load}\n")
            print(
                f"  {out.name}: {time.perf_counter() - t:.0f} s, load average {load:.1f}",
                flush=True,
            )
            return Run(job, link, out, load)
        print(f"  {out.name} failed (try {attempt}): {proc.stderr.strip()[-600:]}", flush=True)
    raise SystemExit(f"{' '.join(cmd)} failed twice")


def whatif(run: Path, nets: list[str], extra: Sequence[str] = ()) -> dict[str, Any]:
    """``commlens whatif RUN --net NETS --steps 1: --format json``, read back."""
    answer = (
        run.parent / f"{run.name}.whatif-{len(list(run.parent.glob(run.name + '.whatif-*')))}.json"
    )
    cmd = [sys.executable, "-m", "commlens", "whatif", str(run), "--net", ",".join(nets)]
    cmd += ["--steps", "1:", *extra, "--format", "json", "-o", str(answer)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(answer.read_text())
    return data


def medians(answer: dict[str, Any]) -> list[float]:
    """Median step of each network of a whatif answer, in the order given to --net."""
    return [float(n["median_step_s"]) for n in answer["networks"]]


def captured(answer: dict[str, Any]) -> float:
    return float(answer["captured"]["median_step_s"])


def own_link(answer: dict[str, Any]) -> float:
    return float(answer["own_link"]["median_step_s"])


def commit() -> str:
    """The commit the window runs on (and whether the tree has changes): git's, or a
    snapshot's ``COMMIT`` file (``git archive`` of a commit, so that a checkout moving
    on meanwhile does not change the code measured)."""
    stamp = REPO / "COMMIT"
    if stamp.is_file():
        return stamp.read_text().strip() + " (snapshot)"
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout.strip()
    return head + (" (with uncommitted changes)" if dirty else "")


def fit_unshaped(out: Path) -> str:
    """A ``bench --fit`` profile of the unshaped link, or ``unshaped`` (the built-in
    model) when the fit is refused."""
    path = out / "unshaped-fit.toml"
    cmd = [sys.executable, "-m", "commlens", "bench", "--nproc", "4", "--nodes", "2"]
    cmd += ["--ops", "all_reduce,all_gather,sendrecv", "--sizes", "4K:1M:4", "-w", "3"]
    cmd += ["-n", "20", "--fit", str(path), "--fit-name", "unshaped-fit"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    quality = [line for line in proc.stderr.splitlines() if line.startswith(("fit ", "warning"))]
    for line in quality:
        print(f"  {line}")
    if proc.returncode:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
        print(f"  no fit of the unshaped link: {why}; its built-in model instead", flush=True)
        return FAST
    return str(path)


def run_window(opts: Options, window: int, attempt: int) -> tuple[Window, str]:
    """One window of the main set: its cells and its table."""
    real = real_job(opts, window)
    jobs = [*CONTROLLED, real]
    where = opts.out / f"w{window}-a{attempt}"
    where.mkdir(parents=True, exist_ok=True)
    at = commit()
    print(f"window {window} (attempt {attempt}) at {at}, real job {real}", flush=True)
    nets = list(LINKS)
    if opts.fit_unshaped:
        nets[LINKS.index(FAST)] = fit_unshaped(where)
    runs: dict[tuple[str, str], list[Run]] = {(j, x): [] for j in jobs for x in LINKS}
    for rep in range(1, opts.repeats + 1):
        for link in LINKS:
            for job in jobs:
                out = where / f"{job}-{link}-r{rep}"
                runs[job, link].append(launch(job, out, link, opts.steps, reuse=opts.reuse))
    result = Window(loads=[r.load for rs in runs.values() for r in rs])
    for job in jobs:
        answers = [whatif(r.path, nets) for r in runs[job, CAPTURE]]
        caps = [captured(a) for a in answers]
        capture_cv = cv(caps)
        controlled = job in CONTROLLED
        result.cells.append(
            Cell(job, CAPTURE, True, controlled, [own_link(a) for a in answers], caps)
        )
        for k, link in enumerate(LINKS):
            if link == CAPTURE:
                continue
            measured = [captured(whatif(r.path, [link])) for r in runs[job, link]]
            guesses = [medians(a)[k] for a in answers]
            result.cells.append(Cell(job, link, False, controlled, guesses, measured, capture_cv))
    title = (
        f"window {window} (attempt {attempt}), commit {at}: 4 ranks on 2 emulated nodes, "
        f"captured at {CAPTURE}, {opts.repeats} runs per (job, link) interleaved, "
        f"{opts.steps} steps (median after the first); unshaped predicted with "
        f"{'its bench --fit profile' if nets[2] != FAST else 'the built-in model'}"
    )
    return result, table(result, title, SLOW, FAST)


def main_set(opts: Options) -> None:
    voids = 0
    for window in range(opts.first_window, opts.first_window + opts.windows):
        for attempt in range(1, opts.max_void + 2):
            result, text = run_window(opts, window, attempt)
            why = result.void_reasons()
            if not why:
                print(text, flush=True)
                break
            voids += 1
            print(f"window {window} attempt {attempt} VOID, not scored: {'; '.join(why)}")
            print(text.replace("\n", "\n  | "), flush=True)
        else:
            print(f"window {window}: void {opts.max_void + 1} times, given up")
    print(f"void windows: {voids}")


def scale_set(opts: Options) -> None:
    """2-rank captures predicted at 4 ranks on 2 nodes; 4-rank runs on 4 nodes."""
    where = opts.out / "scale"
    at = commit()
    print(f"scale-out at {at}", flush=True)
    jobs = ["ddp-sleep", "zero3"]
    shapes = {"2x1": (2, 2), "4x2": (4, 2), "4x4": (4, 4)}  # name: (ranks, nodes)
    runs: dict[tuple[str, str], list[Run]] = {(j, s): [] for j in jobs for s in shapes}
    for rep in range(1, opts.repeats + 1):
        for job in jobs:
            for shape, (nproc, nodes) in shapes.items():
                out = where / f"{job}-{shape}-r{rep}"
                runs[job, shape].append(
                    launch(job, out, CAPTURE, opts.steps, nproc, nodes, opts.reuse)
                )
    result = Window(loads=[r.load for rs in runs.values() for r in rs])
    cases = (  # --nodes/--ranks-per-node place the captured ranks; --dp's copies follow
        ("2x1", "4x2", ["--dp", "4", "--ranks-per-node", "2"]),
        ("4x2", "4x4", ["--nodes", "4", "--ranks-per-node", "1"]),
    )
    for job in jobs:
        for source, target, flags in cases:
            answers = [whatif(r.path, [CAPTURE], flags) for r in runs[job, source]]
            guesses = [medians(a)[0] for a in answers]
            caps = [captured(a) for a in answers]
            measured = [captured(whatif(r.path, [CAPTURE])) for r in runs[job, target]]
            cap_cv = cv(caps)
            label = f"{source}>{target}"
            result.cells.append(
                Cell(job, label, False, job in CONTROLLED, guesses, measured, cap_cv)
            )
            print(
                f"  {job} {label} ({' '.join(flags)}): captures {mean(caps) * 1e3:.1f} ms "
                f"at {source}",
                flush=True,
            )
    title = (
        f"scale-out, commit {at}: link {CAPTURE}, NxK = N ranks on K nodes; "
        f"{opts.repeats} runs of each, {opts.steps} steps"
    )
    print(table(result, title, SLOW, FAST), flush=True)


def fsdp2_set(opts: Options) -> None:
    """FSDP2 on 2 ranks over 2 nodes, captured unshaped, predicted at 200 Mbit/s."""
    where = opts.out / "fsdp2"
    at = commit()
    job = "fsdp2-script"
    runs: dict[str, list[Run]] = {FAST: [], SLOW: []}
    for rep in range(1, opts.repeats + 1):
        for link in (FAST, SLOW):
            out = where / f"{link}-r{rep}"
            runs[link].append(launch(job, out, link, opts.steps, 2, 2, opts.reuse))
    measured = [captured(whatif(r.path, [SLOW])) for r in runs[SLOW]]
    target = mean(measured)
    lines = [
        f"FSDP2 (examples/fsdp2_train.py), 2 ranks on 2 nodes, commit {at}: captured unshaped, "
        f"predicted at {SLOW}; measured there {', '.join(f'{m * 1e3:.1f}' for m in measured)} ms "
        f"(mean {target * 1e3:.1f})",
        f"{'capture':8s} {'captured':>9s} {'own link':>9s} {SLOW:>9s} {'error':>7s} "
        f"{'within 10%':>10s} {'not faster than own':>19s}",
    ]
    for k, r in enumerate(runs[FAST], 1):
        a = whatif(r.path, [SLOW, FAST])
        guess, own = medians(a)[0], own_link(a)
        err = guess / target - 1.0
        lines.append(
            f"{k:<8d} {captured(a) * 1e3:7.1f}ms {own * 1e3:7.1f}ms {guess * 1e3:7.1f}ms "
            f"{err:+7.1%} {'yes' if abs(err) <= 0.10 else 'no':>10s} "
            f"{'yes' if guess >= own else 'NO':>19s}"
        )
    loads = [r.load for rs in runs.values() for r in rs if r.load == r.load]
    if loads:
        lines.append(f"load average over the runs: {min(loads):.1f} to {max(loads):.1f}")
    print("\n".join(lines), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for name in opts.sets:
        {"main": main_set, "scale": scale_set, "fsdp2": fsdp2_set}[name](opts)
    print(f"took {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
