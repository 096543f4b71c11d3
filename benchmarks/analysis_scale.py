"""Benchmark: ``commlens report --format json`` and ``compare`` on 10 M events.

    .venv/bin/python benchmarks/analysis_scale.py [--events 10000000] [--ranks 8] [--keep DIR]

Writes a run of about ``--events`` events over ``--ranks`` ranks (tp 2 x pp 2 x
dp ranks/4, 4 microbatches of 8 layers a stage, as many steps as the events
need) with :func:`commlens.trace.synthetic.generate` (not timed), then runs
each command as a child process and reports its wall time, peak RSS (from
``wait4``) and events/s. Target on a 2-core machine: <= 15 s and <= 2 GiB each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _child import run_child

from commlens.trace.synthetic import Spec, generate


def make_run(out: Path, n_events: int, world: int) -> int:
    """Write the run; returns its number of events."""
    if world % 4:
        raise SystemExit(f"--ranks: {world} is not a multiple of tp 2 x pp 2 = 4")
    spec = Spec(tp=2, pp=2, dp=world // 4, microbatches=4, layers=8).with_events(n_events)
    return generate(out, spec).events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--keep", help="write the run here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.keep) if args.keep else Path(tmp) / "run"
        t = time.perf_counter()
        events = make_run(run, args.events, args.ranks)
        size = sum(f.stat().st_size for f in run.iterdir())
        print(
            f"generated {events:,} events over {args.ranks} ranks "
            f"({size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s"
        )
        exe = [sys.executable, "-m", "commlens"]
        results = {}
        for name, cmd in (
            ("report --format json", [*exe, "report", str(run), "--format", "json"]),
            ("compare RUN RUN", [*exe, "compare", str(run), str(run), "--format", "json"]),
        ):
            used = run_child(cmd)
            print(
                f"{name:22s} wall {used.wall_s:6.2f} s  cpu {used.cpu_s:6.2f} s  "
                f"peak RSS {used.peak_rss_gib:5.2f} GiB  "
                f"{events / used.wall_s / 1e6:5.2f} M events/s  {used.verdict(15, 2)}"
            )
            results[name] = used.to_dict()
        load = os.getloadavg()[0]
        print(
            f"load average during the run: {load:.1f} on {os.cpu_count()} CPUs "
            "(wall times grow with other work on the machine; cpu does not)"
        )
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
