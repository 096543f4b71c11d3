"""Benchmark: every command on generated 3D-parallel runs of growing rank counts.

    .venv/bin/python benchmarks/scale.py [--ranks 128,512,1024,1024@20M] [--steps N]
        [--keep DIR] [--reuse] [--only NAME,...]

Per size: a run of tp 8 x pp 4 x dp (ranks / 32), 8 ranks a node, written
by :func:`commlens.trace.synthetic.generate` one directory per node (its CPU
and wall time and the size on disk printed, not counted as a command;
``merge``, the first command, joins the node directories into the run the
others read; a second run of the same shape, another seed, for ``compare``),
then each command as a child process, with its CPU time (user + system) and
peak RSS from ``wait4`` (this process stays small: a child's peak counts what
it was forked with). A size ``N`` is ``--microbatches`` microbatches of
``--layers`` layers a stage; ``N@20M`` keeps the steps and 8 microbatches and
takes as many layers a stage as give about 20 M events
(:meth:`commlens.trace.synthetic.Spec.with_layers_for`).
``--keep DIR`` keeps the runs, one folder per size (``DIR/128``, ``DIR/1024-20M``,
...: ``nodes/``, the merged ``run/``, ``other/``) and each command's output
beside them (``out/``); otherwise they go to a temporary directory, removed at
the end. ``--reuse`` takes a kept size's runs as they are when complete (no
generation; ``merge`` then writes a scratch copy, removed after it is timed).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from _child import Usage, run_child

from commlens.trace.synthetic import Planted, Spec, generate

COMMANDS: list[tuple[str, list[str]]] = [
    ("merge", ["merge", "{merged}", "{nodes}"]),
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
    (
        "export chrome pp group",
        ["export", "{run}", "--group", "{pp_group}", "-o", "{out}/trace-group.json"],
    ),
    ("validate", ["validate", "{run}"]),
    ("whatif other net", ["whatif", "{run}", "--net", "rdma-100g"]),
    ("whatif 16 a node", ["whatif", "{run}", "--net", "tcp-10g", "--ranks-per-node", "16"]),
    ("doctor", ["doctor", "{run}"]),
]
OK_RC = {"validate": {0, 1}, "doctor": {0, 1}}
"""Exit statuses that are answers, not failures (1: a gap or a problem found)."""
_SIZE = re.compile(r"^(\d+)(?:@(\d+(?:\.\d+)?)([kKmM]?))?$")


@dataclass(frozen=True)
class Size:
    """One column of the table: a rank count, and an event count to size the shape to."""

    ranks: int
    events: int | None
    label: str

    @property
    def folder(self) -> str:
        return self.label.replace("@", "-")


def parse_sizes(text: str) -> list[Size]:
    sizes = []
    for token in (t.strip() for t in text.split(",") if t.strip()):
        m = _SIZE.match(token)
        if m is None:
            raise SystemExit(f"--ranks: {token!r} is not N or N@EVENTS (e.g. 1024@20M)")
        scale = {"": 1, "k": 1e3, "m": 1e6}[m.group(3).lower() if m.group(3) else ""]
        events = round(float(m.group(2)) * scale) if m.group(2) else None
        sizes.append(Size(int(m.group(1)), events, token.upper() if events else token))
    return sizes


def spec_for(size: Size, args: argparse.Namespace, seed: int = 0) -> Spec:
    tp, pp = 8, 4
    if size.ranks % (tp * pp):
        raise SystemExit(f"--ranks: {size.ranks} is not a multiple of tp 8 x pp 4 = 32")
    spec = Spec(
        tp=tp,
        pp=pp,
        dp=size.ranks // (tp * pp),
        ranks_per_node=8,
        steps=args.steps,
        microbatches=8 if size.events else args.microbatches,
        layers=args.layers,
        seed=seed,
    )
    return spec.with_layers_for(size.events) if size.events else spec


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _disk_gib(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) / 2**20


def _complete(where: Path) -> bool:
    return (
        all((where / d / "run.json").is_file() for d in ("run", "other"))
        and (where / "nodes").is_dir()
    )


def make_runs(where: Path, size: Size, args: argparse.Namespace) -> tuple[Spec, int, str]:
    """Generate (or, with --reuse, find) the size's runs; (its spec, its events, the name
    of its first pp group)."""
    spec = spec_for(size, args)
    run, other, nodes = where / "run", where / "other", where / "nodes"
    # groups are named "1", "2", ... in the order tp, dp, pp ("0" is the world)
    before = [spec.world_size // d for d in (spec.tp, spec.dp) if d > 1]
    first_pp = str(1 + sum(before))
    if args.reuse and _complete(where):
        events = spec.events_per_step() * spec.steps
        print(
            f"{size.label}: {events:,} events ({spec.layers} layers a stage), reused from {where}"
        )
        return spec, events, first_pp
    for d in (run, other, where / "out", nodes):
        if d.exists():
            shutil.rmtree(d)
    wall, cpu = time.perf_counter(), _children_cpu()
    # generated in a child: a command forked from this process would report its
    # peak RSS (ru_maxrss counts the memory a child starts with)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        planted: Planted = pool.submit(generate, nodes, spec, per_node=True).result()
        half = time.perf_counter()
        pool.submit(generate, other, spec_for(size, args, seed=1)).result()
    wall_each = ((half - wall), time.perf_counter() - half)
    cpu_both = _children_cpu() - cpu
    assert planted.names["pp"][0] == first_pp
    print(
        f"{size.label}: {planted.events:,} events ({spec.layers} layers a stage, "
        f"{spec.microbatches} microbatches, {spec.steps} steps) per run; two runs generated "
        f"in {sum(wall_each):.0f} s wall ({wall_each[0]:.0f} + {wall_each[1]:.0f}), "
        f"{cpu_both:.0f} CPU s; on disk: nodes {_disk_gib(nodes):.2f} GiB, "
        f"other {_disk_gib(other):.2f} GiB",
        flush=True,
    )
    return spec, planted.events, first_pp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--ranks", default="128,512,1024", help="sizes, comma-separated: N or N@EVENTS (1024@20M)"
    )
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--layers", type=int, default=8, help="layers per stage (4 TP ops each)")
    ap.add_argument("--keep", type=Path, help="keep the runs here, one folder per size")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse complete runs")
    ap.add_argument("--only", default="", help="only these commands (names as printed, comma list)")
    args = ap.parse_args()
    sizes = parse_sizes(args.ranks)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if args.reuse and args.keep is None:
        raise SystemExit("--reuse needs --keep DIR")
    base = args.keep or Path(tempfile.mkdtemp(prefix="commlens-scale-"))
    exe = [sys.executable, "-m", "commlens"]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs"
    )
    rows: list[tuple[Size, int, str, Usage]] = []
    counts: dict[str, int] = {}
    try:
        for size in sizes:
            where = base / size.folder
            reused = args.reuse and _complete(where)
            _spec, events, pp_group = make_runs(where, size, args)
            counts[size.label] = events
            run, other, out, nodes = where / "run", where / "other", where / "out", where / "nodes"
            out.mkdir(parents=True, exist_ok=True)
            merged = out / "merged" if reused else run
            for name, argv in COMMANDS:
                if only and name not in only and name != "merge":
                    continue
                if merged.exists() and name == "merge":
                    shutil.rmtree(merged)
                node_dirs = [str(d) for d in sorted(nodes.iterdir())]
                fields = {"run": run, "other": other, "out": out, "merged": merged}
                cmd = [
                    x
                    for a in argv
                    for x in (
                        node_dirs
                        if a == "{nodes}"
                        else [a.format(pp_group=pp_group, **{k: str(v) for k, v in fields.items()})]
                    )
                ]
                usage = run_child([*exe, *cmd], out / (name.replace(" ", "_") + ".out"))
                if reused and name == "merge":
                    shutil.rmtree(merged, ignore_errors=True)
                ok = usage.rc == 0 or usage.rc in OK_RC.get(name, set())
                rows.append((size, events, name, usage))
                print(
                    f"  {name:<22} cpu {usage.cpu_s:7.1f} s  wall {usage.wall_s:7.1f} s  "
                    f"peak {usage.peak_rss_gib:5.2f} GiB  load "
                    f"{os.getloadavg()[0]:.1f}{'' if ok else f'  FAILED rc={usage.rc}'}",
                    flush=True,
                )
            if not reused:
                print(f"  run on disk: {_disk_gib(run):.2f} GiB", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print()
    head = [f"{s.label} ranks, {counts.get(s.label, 0):,} events" for s in sizes]
    print("| command (CPU s / wall s / peak GiB) | " + " | ".join(head) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, _ in COMMANDS:
        if only and name not in only and name != "merge":
            continue
        cells = [
            f"{u.cpu_s:.1f} / {u.wall_s:.1f} / {u.peak_rss_gib:.2f}"
            + ("" if u.rc in {0} | OK_RC.get(name, set()) else " (failed)")
            for s in sizes
            for z, _e, c, u in rows
            if z is s and c == name
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
