"""Where a window's errors sit: per op, measured against replayed, from whatif's JSON.

    .venv/bin/python benchmarks/accuracy_explain.py DIR [--capture 1gbit]

DIR is a window of ``whatif_accuracy.py`` (``OUT/wN-aK``, ``OUT/scale``): its runs'
``whatif`` answers (``RUN.whatif-0.json``) are read back, nothing is run. Per job,
the self-replay (each capture on its own link against itself) and each other
link (the captures' predictions against that link's runs), split by (op,
role): the op's service (latest member's issue to the latest end), its time
summed over the ranks' calls, and its exposed time, per step (means over the
captures and over the runs), then the step and the communication's exposed
time in all.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIELDS = ("service_s", "time_s", "exposed_s")


def _answers(folder: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each (job, link)'s whatif answers, one per run (its latest: a run scored again
    with ``--reuse`` has answers numbered on), in run order."""
    latest: dict[str, tuple[int, Path]] = {}
    for path in folder.glob("*-r*.whatif-*.json"):
        run, number = path.name.removesuffix(".json").rsplit(".whatif-", 1)
        if number.isdigit() and int(number) >= latest.get(run, (-1, path))[0]:
            latest[run] = (int(number), path)
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run, (_, path) in sorted(latest.items()):
        m = re.fullmatch(r"(.+)-([^-]+)-r(\d+)", run)
        if m:
            found.setdefault((m[1], m[2]), []).append(json.loads(path.read_text()))
    return found


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _ops(figures: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per 'op role', each field's mean over ``figures`` (an op absent from one counts 0)."""
    keys = dict.fromkeys(f"{o['op']} {o['role']}".strip() for f in figures for o in f["ops"])
    out = {}
    for key in keys:
        row = {}
        for field in FIELDS:
            vals = []
            for f in figures:
                ops = {f"{o['op']} {o['role']}".strip(): o for o in f["ops"]}
                vals.append(float(ops[key][field]) if key in ops else 0.0)
            row[field] = _mean(vals)
        out[key] = row
    return out


def compare(real: list[dict[str, Any]], guess: list[dict[str, Any]], what: str) -> list[str]:
    """Lines comparing measured figures ``real`` with replayed ``guess`` (means of each)."""

    def ms(x: float) -> str:
        return f"{x * 1e3:7.1f}"

    def rel(g: float, r: float) -> str:
        return f"{g / r - 1.0:+6.1%}" if r >= 1e-4 else "     -"  # not of a 0.1 ms time

    step_r = _mean([f["median_step_s"] for f in real])
    step_g = _mean([f["median_step_s"] for f in guess])
    exp_r = _mean([f["exposed_s"] for f in real])
    exp_g = _mean([f["exposed_s"] for f in guess])
    lines = [
        f"  {what}: step {ms(step_r)} measured, {ms(step_g)} replayed ({rel(step_g, step_r)}); "
        f"exposed comm {ms(exp_r)} / {ms(exp_g)} ms ({(exp_g - exp_r) * 1e3:+.1f} ms); "
        f"the rest of the step {ms(step_r - exp_r)} / {ms(step_g - exp_g)} ms",
        f"    {'op':18s} {'service meas/replay (ms)':>30s} {'time':>24s} {'exposed':>24s}",
    ]
    r_ops, g_ops = _ops(real), _ops(guess)
    for key in dict.fromkeys([*r_ops, *g_ops]):
        r, g = (
            r_ops.get(key, dict.fromkeys(FIELDS, 0.0)),
            g_ops.get(key, dict.fromkeys(FIELDS, 0.0)),
        )
        cols = [f"{ms(r[f])} {ms(g[f])} {rel(g[f], r[f])}" for f in FIELDS]
        lines.append(f"    {key:18s} {cols[0]:>30s} {cols[1]:>24s} {cols[2]:>24s}")
    return lines


def explain(folder: Path, capture: str) -> str:
    answers = _answers(folder)
    jobs = dict.fromkeys(job for job, _ in answers)
    lines = [f"where the errors sit: {folder}"]
    for job in jobs:
        caps = answers.get((job, capture), [])
        if not caps:
            continue
        lines.append(f"{job} ({len(caps)} captures at {capture})")
        lines += compare([a["captured"] for a in caps], [a["own_link"] for a in caps], "self")
        nets = [n["name"] for n in caps[0]["networks"]]
        for (j, link), runs in answers.items():
            if j != job or link == capture or link not in nets:
                continue
            k = nets.index(link)
            guess = [a["networks"][k] for a in caps]
            lines += compare([a["captured"] for a in runs], guess, link)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--capture", default="1gbit")
    a = p.parse_args(argv)
    if not a.folder.is_dir():
        p.error(f"{a.folder}: no such folder")
    print(explain(a.folder, a.capture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
