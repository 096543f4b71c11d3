"""Benchmark: every command on generated 3D-parallel runs of growing rank counts.

    .venv/bin/python benchmarks/scale.py [--ranks 128,512,1024] [--steps N] [--keep DIR]
        [--only NAME,...]

Per rank count: a run of tp 8 x pp 4 x dp (ranks / 32), 8 ranks a node, written
by :func:`commlens.trace.synthetic.generate` one directory per node (not timed;
``merge``, the first command, joins them into the run the others read; a
second run of the same shape, another seed, for ``compare``), then each command as a child
process, with its CPU time (user + system) and peak RSS from ``wait4`` (this
process stays small: a child's peak counts what it was forked with).
``--keep DIR`` keeps the runs, one folder per rank count (``DIR/128``, ...),
and each command's output beside them; otherwise they go to a temporary
directory, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from _child import Usage, run_child

from commlens.trace.synthetic import Spec, generate

COMMANDS: list[tuple[str, list[str]]] = [
    ("merge", ["merge", "{run}", "{nodes}"]),
    ("report text", ["report", "{run}"]),
    ("report md", ["report", "{run}", "--format", "md"]),
    ("report html", ["report", "{run}", "--format", "html", "-o", "{out}/report.html"]),
    ("report json", ["report", "{run}", "--format", "json"]),
    ("report csv", ["report", "{run}", "--format", "csv"]),
    ("compare", ["compare", "{run}", "{other}"]),
    (
        "query",
        ["query", "{run}", "SELECT rank, op, count(*), sum(size_bytes) FROM events GROUP BY ALL"],
    ),
    (
        "export chrome 0-7",
        ["export", "{run}", "--ranks", "0-7", "-o", "{out}/trace.json"],
    ),
    ("validate", ["validate", "{run}"]),
    ("whatif other net", ["whatif", "{run}", "--net", "rdma-100g"]),
    ("whatif 16 a node", ["whatif", "{run}", "--net", "tcp-10g", "--ranks-per-node", "16"]),
    ("doctor", ["doctor", "{run}"]),
]
OK_RC = {"validate": {0, 1}, "doctor": {0, 1}}
"""Exit statuses that are answers, not failures (1: a gap or a problem found)."""


def spec_for(ranks: int, steps: int, mb: int, layers: int, seed: int = 0) -> Spec:
    tp, pp = 8, 4
    if ranks % (tp * pp):
        raise SystemExit(f"--ranks: {ranks} is not a multiple of tp 8 x pp 4 = 32")
    return Spec(
        tp=tp,
        pp=pp,
        dp=ranks // (tp * pp),
        ranks_per_node=8,
        steps=steps,
        microbatches=mb,
        layers=layers,
        seed=seed,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="128,512,1024", help="rank counts, comma-separated")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--layers", type=int, default=8, help="layers per stage (4 TP ops each)")
    ap.add_argument("--keep", type=Path, help="keep the runs here, one folder per rank count")
    ap.add_argument("--only", default="", help="only these commands (names as printed, comma list)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.ranks.split(",") if x]
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    base = args.keep or Path(tempfile.mkdtemp(prefix="commlens-scale-"))
    exe = [sys.executable, "-m", "commlens"]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs"
    )
    rows: list[tuple[int, int, str, Usage]] = []
    try:
        for n in sizes:
            where = base / str(n)
            run, other, out = where / "run", where / "other", where / "out"
            nodes = where / "nodes"
            for d in (run, other, out, nodes):
                if d.exists():
                    shutil.rmtree(d)
            out.mkdir(parents=True)
            t = time.perf_counter()
            spec = spec_for(n, args.steps, args.microbatches, args.layers)
            # generated in a child: a command forked from this process would report its
            # peak RSS (ru_maxrss counts the memory a child starts with)
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                planted = pool.submit(generate, nodes, spec, per_node=True).result()
                other_spec = spec_for(n, args.steps, args.microbatches, args.layers, seed=1)
                pool.submit(generate, other, other_spec).result()
            print(
                f"{n} ranks: {planted.events:,} events, generated in "
                f"{time.perf_counter() - t:.0f} s",
                flush=True,
            )
            for name, argv in COMMANDS:
                if only and name not in only and name != "merge":
                    continue
                node_dirs = [str(d) for d in sorted(nodes.iterdir())]
                cmd = [
                    x
                    for a in argv
                    for x in (
                        node_dirs if a == "{nodes}" else [a.format(run=run, other=other, out=out)]
                    )
                ]
                usage = run_child([*exe, *cmd], out / (name.replace(" ", "_") + ".out"))
                ok = usage.rc == 0 or usage.rc in OK_RC.get(name, set())
                rows.append((n, planted.events, name, usage))
                print(
                    f"  {name:<18} cpu {usage.cpu_s:7.1f} s  wall {usage.wall_s:7.1f} s  "
                    f"peak {usage.peak_rss_gib:5.2f} GiB{'' if ok else f'  FAILED rc={usage.rc}'}",
                    flush=True,
                )
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print()
    print("| command | " + " | ".join(f"{n} ranks: CPU s / peak GiB" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, _ in COMMANDS:
        if only and name not in only and name != "merge":
            continue
        cells = [
            f"{u.cpu_s:.1f} / {u.peak_rss_gib:.2f}"
            + ("" if u.rc in {0} | OK_RC.get(name, set()) else " (failed)")
            for n in sizes
            for m, _e, c, u in rows
            if m == n and c == name
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
