"""What tracing costs: per intercepted call, and per training step.

Three measurements in one invocation, arms interleaved so machine noise hits
them alike:

1. Added time per intercepted call: blocks of ``all_reduce`` calls on a
   4-element tensor, untraced and traced in turn (ABBA order, so neither arm
   always runs first); the median over blocks of the per-call difference.
   On a one-rank gloo group (a real backend: each call crosses to gloo's
   worker thread and back), and on torch's ``fake`` backend, whose calls
   return at once, so what remains is the capture's own cost.
   The same for an async ``all_reduce`` and its ``wait()`` on gloo: timed to
   completion by a callback on gloo's worker thread.
2. The same for functional collectives (DTensor's path): issue plus wait;
   and the added CPU time per module call, in forward and in backward, on a
   chain of 200 ``Linear(4, 4)`` with the step tracker's module wrapper on
   and off.
3. Step time of 2-rank DDP training, untraced, traced, and under
   ``torch.profiler``, for three jobs: the bundled GPT (``gpt-19m`` as
   ``commlens run --model gpt-19m --scheme dp`` trains it: 128 tokens x 2
   sequences per rank, 25 MB buckets); a small transformer of many modules
   (12 blocks of 10 module calls each at width 32 on 2 x 32 tokens: 125
   module calls per forward in a step of tens of milliseconds, so the
   capture's cost per module call weighs the most); and a small-bucket stress job (6 x
   Linear(512, 512) on 64 rows: two buckets in a ~25 ms step, so the fixed
   cost per bucket weighs the most). (a) Paired, in one job: rounds of three
   blocks of steps, one per arm in rotating order, the untraced ones with the
   originals put back and torch's global module and optimizer hooks set
   aside; the median of the per-round ratios of median step time (and of the
   process's CPU time per step), with a 95% bootstrap interval; (b) for the
   stress job, whole runs too, each arm a fresh pair of processes, in
   rotating order; the ratio of median step times. (a) resolves small
   differences that (b) cannot on a noisy machine.

Targets: <= 5 us added per call (median), traced/untraced <= 1.03.

    python benchmarks/capture_overhead.py [--rounds 5] [--steps 30] [--blocks 41]
                                          [--paired-rounds 80] [--gpt-rounds 30]
                                          [--modules-rounds 60]
                                          [--only calls|gpt|modules|stress|whole ...]
                                          [--calls-only]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

import commlens
from commlens.launch import free_port, launch_ranks

Block = Callable[[], tuple[float, float]]
PARTS = ("calls", "gpt", "modules", "stress", "whole")


def _timed(calls: int, one: Callable[[], Any]) -> Block:
    def block() -> tuple[float, float]:
        # Wall time, and this thread's CPU time, per call.
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            one()
        return (time.perf_counter() - t0) / calls, (time.thread_time() - c0) / calls

    return block


def _init(backend: str) -> None:
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
        return
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group(backend, rank=0, world_size=1)


def per_call_overhead(
    backend: str, blocks: int, calls: int, async_op: bool = False
) -> dict[str, float]:
    _init(backend)
    t = torch.ones(4)
    if async_op:  # issue, then wait: the op is timed to completion by a callback
        one: Callable[[], Any] = lambda: dist.all_reduce(t, async_op=True).wait()  # noqa: E731
    else:
        one = lambda: dist.all_reduce(t)  # noqa: E731
    try:
        return _alternate(_timed(calls, one), blocks)
    finally:
        dist.destroy_process_group()


def functional_overhead(blocks: int, calls: int) -> dict[str, float]:
    import torch.distributed._functional_collectives as funcol

    _init("gloo")
    t = torch.ones(4)
    group = dist.group.WORLD
    assert group is not None
    try:
        one = lambda: funcol.wait_tensor(funcol.all_reduce(t, "sum", group))  # noqa: E731
        return _alternate(_timed(calls, one), blocks)
    finally:
        dist.destroy_process_group()


def _alternate(block: Block, blocks: int) -> dict[str, float]:
    """Untraced and traced blocks in one capture: untraced runs with the originals put back."""
    from commlens.capture.patching import suspended

    for _ in range(3):
        block()
    plain: list[tuple[float, float]] = []
    traced: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as out:
        with commlens.capture(out, align_clocks=False):
            block()  # opens the rank's writer
            for i in range(blocks):
                # ABBA: the traced arm runs first in every other pair.
                for arm in (plain, traced) if i % 2 == 0 else (traced, plain):
                    if arm is plain:
                        with suspended():
                            plain.append(block())
                    else:
                        traced.append(block())
        events = commlens.load_run(out, quiet=True).events.num_rows
    diffs = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(plain, traced, strict=True)]
    return {
        "plain_us": statistics.median(p[0] for p in plain) * 1e6,
        "traced_us": statistics.median(p[0] for p in traced) * 1e6,
        "added_us": statistics.median(d[0] for d in diffs) * 1e6,
        "added_cpu_us": statistics.median(d[1] for d in diffs) * 1e6,
        "events": events,
    }


def module_call_overhead(blocks: int, chain: int = 200, reps: int = 10) -> dict[str, float]:
    """Added CPU time per module call, in forward and in backward: a chain of small Linears.

    What a module call costs the capture is its ``Module.__call__`` wrapper
    (the step tracker's); in backward, whatever that wrapper leaves on the graph.
    """
    from commlens.capture.context import StepTracker

    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(chain)])
    x = torch.randn(2, 4, requires_grad=True)
    calls = chain + 1  # the Sequential's own call too

    def block() -> tuple[float, float]:
        forward = backward = 0.0
        for _ in range(reps):
            c0 = time.thread_time()
            y = model(x)
            c1 = time.thread_time()
            y.sum().backward()
            forward += c1 - c0
            backward += time.thread_time() - c1
        return forward / reps / calls, backward / reps / calls

    tracker = StepTracker()
    for _ in range(3):
        block()
    diffs = []
    for i in range(blocks):
        pair = []
        for traced in (False, True) if i % 2 == 0 else (True, False):
            if traced:
                tracker.install()
            try:
                pair.append((traced, block()))
            finally:
                if traced:
                    tracker.uninstall()
        (_, plain), (_, with_tracker) = sorted(pair)
        diffs.append((with_tracker[0] - plain[0], with_tracker[1] - plain[1]))
    return {
        "forward_us": statistics.median(d[0] for d in diffs) * 1e6,
        "backward_us": statistics.median(d[1] for d in diffs) * 1e6,
    }


def _many_modules(width: int = 32, blocks: int = 12, vocab: int = 256) -> Any:
    """A small GPT-shaped transformer of many modules (10 module calls per block)."""
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.act, self.drop = nn.GELU(), nn.Dropout(0.0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            x = x + self.drop(self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
            return x + self.drop(self.out(self.act(self.fc(self.ln2(x)))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.tok(ids)
            for block in self.blocks:
                h = block(h)
            return F.cross_entropy(self.head(self.ln_f(h)).flatten(0, 1), ids.flatten())

    return Model()


def _ddp_job(job: str) -> Callable[[], None]:
    """One training step of a 2-rank DDP job: ``gpt``, ``modules`` or ``mlp`` (the module doc)."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    if job == "gpt":  # built as ``commlens run`` builds it
        from commlens.job import Job, resolve_dims
        from commlens.job.models import get_preset
        from commlens.workloads.data import global_batch, microbatch
        from commlens.workloads.groups import build_groups
        from commlens.workloads.parallelize import parallelize

        cfg = get_preset("gpt-19m")
        wcfg = Job(cfg, "dp", resolve_dims("dp", dist.get_world_size()), seq_len=128, micro_batch=2)
        par = parallelize(wcfg, build_groups(wcfg.dims), torch.device("cpu"))
        rows = wcfg.micro_batch * wcfg.dims.dp
        batch = global_batch(cfg, wcfg.seq_len, rows, step=0, seed=wcfg.run.seed)
        mine = microbatch(batch, dist.get_rank(), wcfg.micro_batch, torch.device("cpu"))
        model, opt = par.model, par.optimizer
        loss: Callable[[], torch.Tensor] = lambda: model(mine)  # noqa: E731
    elif job == "modules":
        model = DDP(_many_modules())
        ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
        loss = lambda: model(ids)  # noqa: E731
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        model = DDP(nn.Sequential(*[nn.Linear(512, 512) for _ in range(6)]))
        x = torch.randn(64, 512)
        loss = lambda: model(x).square().mean()  # noqa: E731
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        loss().backward()
        opt.step()
        opt.zero_grad()

    return step


@contextmanager
def _untraced() -> Iterator[None]:
    """The capture's patches undone and torch's global module and optimizer hooks set aside."""
    from torch.nn.modules import module
    from torch.optim import optimizer

    from commlens.capture.patching import suspended

    names = ("_global_forward_pre_hooks", "_global_forward_hooks",
             "_global_backward_pre_hooks", "_global_backward_hooks")  # fmt: skip
    hooks = [getattr(module, n) for n in names]
    hooks += [optimizer._global_optimizer_pre_hooks, optimizer._global_optimizer_post_hooks]
    saved = [dict(h) for h in hooks]
    for h in hooks:
        h.clear()
    try:
        with suspended():
            yield
    finally:
        for h, kept in zip(hooks, saved, strict=True):
            h.update(kept)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's native library logs every start and stop)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _median_step(step: Callable[[], None], steps: int) -> float:
    return _block(step, steps)[0]


def _block(step: Callable[[], None], steps: int) -> tuple[float, float]:
    """Median wall time of ``steps`` steps, and the process's CPU time per step."""
    times = []
    c0 = time.process_time()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (time.process_time() - c0) / steps


def rank_main(mode: str, steps: int, result: str) -> None:
    """One rank of the DDP arm ``mode``; rank 0 writes what it measured.

    ``paired``: one process, blocks of ``steps`` steps untraced (the originals
    put back), traced, and under torch.profiler, in rotating order. Otherwise
    a whole run in one arm: ``untraced``, ``traced`` or ``profiler``. The job
    is ``$BENCH_JOB`` (``mlp`` unless set).
    """
    from torch.profiler import ProfilerActivity, profile

    job = os.environ.get("BENCH_JOB", "mlp")
    out: Any
    if mode == "paired":
        arms: dict[str, list[tuple[float, float]]] = {"untraced": [], "traced": [], "profiler": []}
        order = list(arms)
        with tempfile.TemporaryDirectory() as tmp, commlens.capture(tmp):
            dist.init_process_group("gloo")
            step = _ddp_job(job)
            _median_step(step, 3 if job == "gpt" else 10)  # warm-up (the bucket rebuild), traced
            for i in range(int(os.environ.get("PAIRED_ROUNDS", "60"))):
                for arm in order[i % 3 :] + order[: i % 3]:
                    if arm == "traced":
                        arms[arm].append(_block(step, steps))
                        continue
                    with _untraced():
                        if arm == "profiler":
                            with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]):
                                arms[arm].append(_block(step, steps))
                        else:
                            arms[arm].append(_block(step, steps))
            dist.barrier()
            dist.destroy_process_group()
        out = arms
    else:

        def whole_run() -> float:
            dist.init_process_group("gloo")
            step = _ddp_job(job)
            _median_step(step, 5)
            median = _median_step(step, steps)
            dist.barrier()
            dist.destroy_process_group()
            return median

        if mode == "traced":
            with tempfile.TemporaryDirectory() as tmp, commlens.capture(tmp):
                out = whole_run()
        elif mode == "profiler":
            with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]):
                out = whole_run()
        else:
            out = whole_run()
    if int(os.environ["RANK"]) == 0:
        with open(result, "w") as fh:
            json.dump(out, fh)


def _launch(mode: str, steps: int, result: str, env: dict[str, str] | None = None) -> Any:
    argv = [sys.executable, __file__, "--rank-main", mode, str(steps), result]
    os.environ.update(env or {})
    launch = launch_ranks(argv, 2)
    if not launch.ok:
        raise SystemExit(f"{mode} arm failed: exit codes {launch.exit_codes}")
    with open(result) as fh:
        return json.load(fh)


def paired_step_ratios(job: str, rounds: int, steps: int) -> dict[str, list[list[float]]]:
    """Per-block (median step time, CPU time per step) of each arm, all in one pair of processes."""
    with tempfile.TemporaryDirectory() as tmp:
        arms: dict[str, list[list[float]]] = _launch(
            "paired",
            steps,
            os.path.join(tmp, "r.json"),
            {"PAIRED_ROUNDS": str(rounds), "BENCH_JOB": job},
        )
    return arms


def median_ratio(
    values: list[float], base: list[float], seed: int = 0
) -> tuple[float, float, float]:
    """Median of per-round ratios with a 95% bootstrap interval."""
    ratios = [v / b for v, b in zip(values, base, strict=True)]
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return statistics.median(ratios), meds[50], meds[1949]


def step_ratios(rounds: int, steps: int) -> dict[str, list[float]]:
    """Median step time of whole runs of the stress job, each arm fresh processes, rotating."""
    arms: dict[str, list[float]] = {"untraced": [], "traced": [], "profiler": []}
    order = list(arms)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for mode in order[r % 3 :] + order[: r % 3]:  # rotate who goes first
                result = _launch(mode, steps, os.path.join(tmp, "r.json"), {"BENCH_JOB": "mlp"})
                arms[mode].append(float(result))
    return arms


def _report_calls(label: str, r: dict[str, float], calls: int, blocks: int) -> None:
    print(
        f"{label}: untraced {r['plain_us']:.2f} us, traced {r['traced_us']:.2f} us, "
        f"added {r['added_us']:.2f} us wall, {r['added_cpu_us']:.2f} us CPU "
        f"(median of {blocks} block pairs of {calls} calls; {r['events']:,} events recorded)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--blocks", type=int, default=41)
    parser.add_argument("--paired-rounds", type=int, default=80)
    parser.add_argument("--gpt-rounds", type=int, default=30)
    parser.add_argument("--modules-rounds", type=int, default=60)
    parser.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        help="run only this part (repeatable): the per-call figures, one job's paired "
        "steps, or the stress job's whole runs",
    )
    parser.add_argument(
        "--calls-only", action="store_true", help="measure the added time per call only"
    )
    parser.add_argument("--rank-main", nargs=3, metavar=("MODE", "STEPS", "RESULT"))
    args = parser.parse_args()
    if args.rank_main:
        mode, steps, result = args.rank_main
        rank_main(mode, int(steps), result)
        return
    parts = ["calls"] if args.calls_only else args.only or list(PARTS)
    summary = []
    if "calls" in parts:
        # gloo's calls jitter by tens of microseconds: more pairs for a steady median.
        gloo = per_call_overhead("gloo", 2 * args.blocks + 1, 400)
        _report_calls("all_reduce, gloo, 1 rank", gloo, 400, 2 * args.blocks + 1)
        gloo_async = per_call_overhead("gloo", 2 * args.blocks + 1, 400, async_op=True)
        _report_calls("async all_reduce + wait, gloo, 1 rank", gloo_async, 400, 2 * args.blocks + 1)
        fake = per_call_overhead("fake", args.blocks, 2000)
        _report_calls("all_reduce, fake backend", fake, 2000, args.blocks)
        func = functional_overhead(args.blocks, 200)
        _report_calls("functional all_reduce + wait, gloo", func, 200, args.blocks)
        mods = module_call_overhead(args.blocks)
        print(
            f"module call, chain of 200 Linear(4, 4), CPU time, {args.blocks} ABBA block pairs: "
            f"+{mods['forward_us']:.2f} us forward, +{mods['backward_us']:.2f} us backward"
        )
        summary.append(
            f"added per call {gloo['added_us']:.2f} us on gloo, {fake['added_us']:.2f} us on "
            "the fake backend (target <= 5 us)"
        )
    paired = {
        "gpt": ("gpt", args.gpt_rounds, 1, "bundled GPT (gpt-19m), 1-step blocks"),
        "modules": ("modules", args.modules_rounds, 3, "many-module transformer, 3-step blocks"),
        "stress": ("mlp", args.paired_rounds, 5, "small-bucket stress job, 5-step blocks"),
    }
    for part, (job, rounds, steps, label) in paired.items():
        if part in parts:
            r = _paired_report(job, rounds, steps, label)
            summary.append(
                f"{part} step traced/untraced {r['traced'][0]:.3f} paired (target <= 1.03), "
                f"profiler/untraced {r['profiler'][0]:.3f}"
            )
    if "whole" in parts:
        summary.append(_whole_runs(args.rounds, args.steps))
    print("; ".join(summary))


def _whole_runs(rounds: int, steps: int) -> str:
    """Run and print the stress job's whole runs; the summary of their ratios."""
    arms = step_ratios(rounds, steps)
    base = statistics.median(arms["untraced"])
    for mode, values in arms.items():
        med = statistics.median(values)
        print(
            f"step, stress job, whole runs, {mode:9s}: median {med * 1e3:7.2f} ms  "
            f"ratio {med / base:.3f}  (rounds: {', '.join(f'{v * 1e3:.2f}' for v in values)} ms)"
        )
    return (
        f"stress job whole runs traced/untraced {statistics.median(arms['traced']) / base:.3f}, "
        f"profiler/untraced {statistics.median(arms['profiler']) / base:.3f}"
    )


def _paired_report(
    job: str, rounds: int, steps: int, label: str
) -> dict[str, tuple[float, float, float]]:
    """Run the paired arms of ``job``, print them; the step-time ratios with their intervals."""
    paired = paired_step_ratios(job, rounds, steps)
    wall = {a: [b[0] for b in v] for a, v in paired.items()}
    cpu = {a: [b[1] for b in v] for a, v in paired.items()}
    print(
        f"step, {label}, paired in one job ({rounds} rounds): "
        f"untraced {statistics.median(wall['untraced']) * 1e3:.2f} ms"
    )
    ratios = {}
    for arm in ("traced", "profiler"):
        w = ratios[arm] = median_ratio(wall[arm], wall["untraced"])
        c = median_ratio(cpu[arm], cpu["untraced"])
        print(
            f"  {arm}/untraced: step time {w[0]:.3f} (95% CI {w[1]:.3f}-{w[2]:.3f}), "
            f"process CPU time {c[0]:.3f} (95% CI {c[1]:.3f}-{c[2]:.3f})"
        )
    return ratios


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
