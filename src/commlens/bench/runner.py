"""The launcher side of ``commlens bench``: start the ranks, follow their progress."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from commlens.bench.names import BACKENDS, OPS
from commlens.bench.ops import DTYPE_ALIASES, DTYPES
from commlens.bench.sizes import MAX_SIZE_BYTES, format_size
from commlens.errors import CommandError, UsageError
from commlens.job.memory import PROCESS_BASELINE_BYTES, check_local_ranks, host_bytes
from commlens.launch import LaunchResult, launch_ranks
from commlens.launch.procs import python_argv
from commlens.safefile import META_LIMIT, read_text
from commlens.tempdirs import temp_dir

MAX_ITERS = 10_000
"""Most timed (or warm-up) calls per op and size; every rank gathers all ranks' times."""
GB = 1e9


@dataclass
class BenchConfig:
    """What to benchmark and where."""

    ops: list[str] = field(default_factory=lambda: ["all_reduce"])
    """Ops to run, from :data:`commlens.bench.names.OPS`."""
    sizes: list[int] = field(default_factory=lambda: [1 << 20])
    """Message sizes S in bytes (nccl-tests convention)."""
    nproc: int = 2
    """Ranks in total."""
    nodes: int = 1
    """Emulated nodes (network namespaces); 1 with no link runs on plain loopback."""
    link: str | None = None
    """Rate of each node's link, e.g. ``1gbit``; needs root."""
    warmup: int = 5
    """Untimed calls before the timed ones, per op and size."""
    iters: int = 20
    """Timed calls per op and size."""
    backend: str = "auto"
    """gloo, nccl, or auto (nccl when CUDA is available)."""
    dtype: str = "float32"
    """Element type of the buffers."""

    def __post_init__(self) -> None:
        bad = [op for op in self.ops if op not in OPS]
        if bad or not self.ops:
            raise UsageError(
                f"unknown op {', '.join(bad) or '(none)'}; choose from {','.join(OPS)}"
            )
        twice = sorted({op for op in self.ops if self.ops.count(op) > 1})
        if twice:
            raise UsageError(f"--ops names {', '.join(twice)} more than once")
        self.dtype = DTYPE_ALIASES.get(self.dtype, self.dtype)
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown --dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
        if self.backend not in BACKENDS:
            raise UsageError(
                f"unknown --backend {self.backend!r}; choose from {', '.join(BACKENDS)}"
            )
        check_local_ranks(self.nproc)
        if self.nodes < 1 or self.nproc % self.nodes:
            raise UsageError(
                f"--nproc {self.nproc} must be a positive multiple of --nodes {self.nodes}"
            )
        if self.iters < 1 or self.warmup < 0:
            raise UsageError("--iters must be at least 1 and --warmup at least 0")
        if self.iters > MAX_ITERS or self.warmup > MAX_ITERS:
            raise UsageError(
                f"--iters {self.iters} / --warmup {self.warmup}: at most {MAX_ITERS:,} calls each"
            )
        if not self.sizes:
            raise UsageError("--sizes is empty")
        if not all(0 < s <= MAX_SIZE_BYTES for s in self.sizes):
            raise UsageError(f"--sizes must lie between 1 byte and {format_size(MAX_SIZE_BYTES)}")

    @property
    def emulated(self) -> bool:
        return self.nodes > 1 or self.link is not None

    def resolved_backend(self) -> str:
        """gloo or nccl; nccl only with a CUDA device for every rank of a node."""
        import torch

        if self.backend == "gloo":
            return "gloo"
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if self.backend == "auto":
            return "nccl" if gpus else "gloo"
        per_node = self.nproc // self.nodes
        if gpus < per_node:
            raise UsageError(
                f"--backend nccl needs {per_node} CUDA device(s) per node, found {gpus}; "
                "use --backend gloo"
            )
        return "nccl"


def rank_bytes(cfg: BenchConfig) -> int:
    """Peak bytes of buffers one rank holds for the largest size (an upper estimate).

    Two buffers of S (all-to-all, send/recv), one expected result and one
    pattern of S for the check, and the check's int64 index temporaries
    (three of S / element size elements, 8 bytes each).
    """
    import torch

    elem = torch.tensor([], dtype=DTYPES[cfg.dtype]).element_size()
    size = max(cfg.sizes)
    return 4 * size + 3 * 8 * (size // elem)


def check_bench_fits(cfg: BenchConfig, available: int | None = None) -> None:
    """A one-line :class:`UsageError` when the ranks cannot hold their buffers here.

    Every rank is a process on this host (emulated nodes share it), paying
    :data:`~commlens.job.memory.PROCESS_BASELINE_BYTES`; on CPU the buffers
    too. With NCCL the buffers are on the GPUs and checked there.
    """
    from commlens.workloads.fit import device_memory_available, host_memory_available

    on_gpu = cfg.resolved_backend() == "nccl"
    buffers = rank_bytes(cfg)
    host = host_memory_available() if available is None else available
    need = host_bytes(buffers, cfg.nproc, on_gpu=on_gpu)
    if need > host:
        detail = f"{PROCESS_BASELINE_BYTES / GB:.2f} GB per process"
        if not on_gpu:
            detail += f" and {buffers / GB:.2f} GB of buffers at {format_size(max(cfg.sizes))}"
        raise UsageError(
            f"{cfg.nproc} ranks need about {need / GB:.1f} GB of host memory ({detail}), "
            f"but only {host / GB:.1f} GB is available; use fewer --nproc or smaller --sizes"
        )
    if on_gpu:
        free = device_memory_available()
        if buffers > free:
            raise UsageError(
                f"buffers of {format_size(max(cfg.sizes))} need about {buffers / GB:.1f} GB "
                f"per GPU, but only {free / GB:.1f} GB is free; use smaller --sizes"
            )


@dataclass
class BenchReport:
    """Rows (one per op and size) of one bench run, with where it ran."""

    config: BenchConfig
    rows: list[dict[str, Any]]
    topology: dict[str, Any] | None = None

    @property
    def measured(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if "skipped" not in row]

    def to_dict(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "topology": self.topology, "results": self.rows}


def rank_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the bench ranks: one thread each unless the user says otherwise."""
    env = dict(os.environ if base is None else base)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d's reverse-DNS warnings in namespaces
    return env


def run_bench(
    cfg: BenchConfig, on_row: Callable[[dict[str, Any]], None] | None = None
) -> BenchReport:
    """Run the benchmark; ``on_row`` is called (from a helper thread) per finished row."""
    backend = cfg.resolved_backend()
    with temp_dir("bench") as tmp:
        results = Path(tmp) / "results.jsonl"
        results.touch()
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({**asdict(cfg), "backend": backend, "results": str(results)}))
        argv = python_argv("commlens.bench.worker", str(config))
        stop = threading.Event()
        follower = threading.Thread(target=_follow, args=(results, stop, on_row), daemon=True)
        follower.start()
        topology = None
        res: LaunchResult
        try:
            if cfg.emulated:
                from commlens.netem import launch_emulated

                res = launch_emulated(argv, cfg.nproc, cfg.nodes, cfg.link, env=rank_env())
                topology = res.topology
            else:
                res = launch_ranks(argv, cfg.nproc, env=rank_env())
        finally:
            stop.set()
            follower.join()
        if res.interrupted:
            raise KeyboardInterrupt
        if not res.ok:
            raise CommandError(f"bench ranks failed (exit codes {res.exit_codes})", res.exit_code)
        text = read_text(results, limit=META_LIMIT, follow=False)
        rows = [json.loads(line) for line in text.splitlines() if line]
    return BenchReport(cfg, rows, topology)


def _follow(
    path: Path, stop: threading.Event, on_row: Callable[[dict[str, Any]], None] | None
) -> None:
    seen = 0
    while True:
        done = stop.is_set()
        # Only lines ended by a newline are complete; the last may still be being written.
        text = read_text(path, limit=META_LIMIT, follow=False) if path.exists() else ""
        complete = text.split("\n")[:-1]
        for line in complete[seen:]:
            if on_row is not None:
                on_row(json.loads(line))
        seen = max(seen, len(complete))
        if done:
            return
        stop.wait(0.1)
