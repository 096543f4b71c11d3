"""Run every scheme of the built-in workloads and hold each run against the model.

    python examples/validate_matrix.py [--out runs/validate] [--quick] [--model gpt-tiny]
        [--seq-lens 32,64] [--steps 3] [--only dp,tp]

``--quick`` runs only the 2-rank cases, at sequence length 32, for 2 steps (a
few minutes on 2 cores instead of the whole matrix). Each case trains a few
steps with capture on (gloo, ranks on this machine), then
``commlens.predict.validate`` holds every rank's calls per step: counts
exact, bytes within 1%. Prints one line per case and exits 1 if any case
does not match.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from commlens.errors import CommlensError
from commlens.job import Job, RunSettings, get_preset, resolve_dims
from commlens.launch.procs import launch_ranks, python_argv
from commlens.predict.validate import validate_run
from commlens.trace.reader import load_run

Case = tuple[str, str, int, dict[str, int], dict[str, Any]]
"""(name, scheme, nproc, degrees, extra workload settings)"""

CASES: list[Case] = [
    ("dp", "dp", 2, {}, {}),
    ("zero1", "zero1", 2, {}, {}),
    ("zero2", "zero2", 2, {}, {"microbatches": 2}),
    ("zero3", "zero3", 2, {}, {"microbatches": 2}),
    ("tp", "tp", 2, {}, {}),
    ("tp-sp", "tp", 2, {}, {"sequence_parallel": True}),
    ("tp-sp-bf16", "tp", 2, {}, {"sequence_parallel": True, "dtype": "bf16"}),
    ("pp-1f1b", "pp", 2, {}, {"microbatches": 4, "schedule": "1f1b"}),
    ("pp-gpipe", "pp", 2, {}, {"microbatches": 4, "schedule": "gpipe"}),
    ("zero3-3", "zero3", 3, {}, {}),  # dims not divisible by 3: FSDP pads its shards
    ("zero1-4", "zero1", 4, {}, {}),
    ("dp4", "dp", 4, {}, {}),
    ("zero2-4", "zero2", 4, {}, {"microbatches": 2}),
    ("zero3-4", "zero3", 4, {}, {}),
    ("tp4-sp", "tp", 4, {}, {"sequence_parallel": True, "recompute": True}),
    ("pp4-dp2-1f1b", "pp", 4, {"pp": 2}, {"microbatches": 4}),
    ("pp4-dp2-gpipe", "pp", 4, {"pp": 2}, {"microbatches": 4, "schedule": "gpipe"}),
    ("tp4-recompute", "tp", 4, {}, {"recompute": True}),
    ("3d-dp2-pp2", "3d", 4, {"dp": 2, "pp": 2, "tp": 1}, {"microbatches": 2}),
    (
        "3d-tp2-pp2-sp",
        "3d",
        4,
        {"tp": 2, "pp": 2, "dp": 1},
        {"microbatches": 2, "sequence_parallel": True},
    ),
    ("3d-dp2-tp2", "3d", 4, {"dp": 2, "tp": 2, "pp": 1}, {"microbatches": 2}),
]


def run_case(
    out: Path,
    model: str,
    case: Case,
    seq_len: int,
    steps: int,
) -> Path:
    name, scheme, nproc, degrees, extra = case
    dims = resolve_dims(scheme, nproc, degrees.get("dp"), degrees.get("tp"), degrees.get("pp"))
    wcfg = Job(
        model=get_preset(model),
        scheme=scheme,
        dims=dims,
        seq_len=seq_len,
        micro_batch=2,
        run=RunSettings(steps=steps),
        **extra,
    )
    run_dir = out / f"{model}-{name}-s{seq_len}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = out / f"{run_dir.name}.json"
    cfg.write_text(json.dumps(wcfg.to_dict()))
    result = launch_ranks(python_argv("commlens.workloads.worker", str(cfg), str(run_dir)), nproc)
    if any(code != 0 for code in result.exit_codes):
        raise RuntimeError(f"{run_dir.name}: ranks exited with {result.exit_codes}")
    return run_dir


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/validate", help="where the runs go")
    ap.add_argument("--model", default="gpt-tiny", help="model preset (default gpt-tiny)")
    ap.add_argument("--seq-lens", default=None, help="comma list of sequence lengths (32,64)")
    ap.add_argument("--steps", type=int, default=None, help="steps per case (default 3)")
    ap.add_argument("--only", default="", help="comma list of case names")
    ap.add_argument(
        "--quick", action="store_true", help="only the 2-rank cases, at s=32, for 2 steps"
    )
    args = ap.parse_args(argv)
    args.seq_lens = args.seq_lens or ("32" if args.quick else "32,64")
    args.steps = args.steps or (2 if args.quick else 3)
    return args


def plan(args: argparse.Namespace) -> list[tuple[Case, int]]:
    """The (case, sequence length) pairs the arguments select, in order."""
    only = {n for n in args.only.split(",") if n}
    t5 = get_preset(args.model).arch == "t5"
    return [
        (case, int(seq_len))
        for seq_len in args.seq_lens.split(",")
        for case in CASES
        if (not only or case[0] in only)
        and not (args.quick and case[2] != 2)
        and not (t5 and case[1] in ("pp", "3d"))  # T5 has no pipeline parallelism
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    failed = 0
    for case, seq_len in plan(args):
        t0 = time.time()
        try:
            run_dir = run_case(out, args.model, case, seq_len, args.steps)
            verdict = validate_run(load_run(run_dir, quiet=True))
        except (RuntimeError, CommlensError) as exc:
            failed += 1
            print(f"{case[0]}-s{seq_len}: ERROR {exc}", flush=True)
            continue
        bad = sorted({f"{c.op}/{c.role}" for c in verdict.failures})
        failed += not verdict.ok
        status = "ok" if verdict.ok else "MISMATCH " + ", ".join(bad)
        print(
            f"{run_dir.name:40s} {len(verdict.checks):4d} checks  {status}"
            f"  ({time.time() - t0:.0f} s)",
            flush=True,
        )
        if not verdict.ok:
            for c in verdict.failures[:5]:
                print(f"    rank {c.rank} step {c.step} {c.op}/{c.role}: {c.reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
