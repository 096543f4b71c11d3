"""Refuse a job that cannot fit before any rank starts."""

from __future__ import annotations

import os

from commlens.errors import UsageError
from commlens.job.memory import PROCESS_BASELINE_BYTES, estimate_memory, host_bytes
from commlens.job.spec import Job

GB = 1e9


def host_memory_available() -> int:
    """Bytes of memory this host can still give (MemAvailable on Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def device_memory_available() -> int:
    """Free bytes on the smallest visible GPU."""
    import torch

    return min(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count()))


def check_fits(job: Job, available: int | None = None) -> int:
    """The per-rank estimate in bytes; a one-line :class:`UsageError` when it does not fit.

    On CPU all ranks share the host's memory; with NCCL each rank has a GPU.
    """
    d = job.dims
    est = estimate_memory(job)
    on_gpu = job.run.backend == "nccl"
    if available is None:
        available = device_memory_available() if on_gpu else host_memory_available()
    # On CPU every rank also pays a torch process's own memory (PROCESS_BASELINE_BYTES).
    need = est.total if on_gpu else host_bytes(est.total, d.world_size)
    if need > available:
        where = "per GPU" if on_gpu else f"for {d.world_size} ranks on this host"
        process = "" if on_gpu else f" plus {PROCESS_BASELINE_BYTES / GB:.2f} GB per process"
        hint = (
            "start fewer ranks (--nproc)"
            if not on_gpu and host_bytes(0, d.world_size) > available
            else "pick a smaller --model, shorter --seq-len, or more ranks/stages"
        )
        raise UsageError(
            f"{job.model.name} needs about {est.total / GB:.1f} GB per rank "
            f"(params {est.params / GB:.1f}, grads {est.grads / GB:.1f}, "
            f"optimizer {est.optimizer / GB:.1f}, activations {est.activations / GB:.1f} GB)"
            f"{process}, {need / GB:.1f} GB {where}, but only {available / GB:.1f} GB is "
            f"available; {hint}"
        )
    if on_gpu:  # the GPUs hold the model; the host still holds every rank's process
        host_need, host = host_bytes(est.total, d.world_size, on_gpu=True), host_memory_available()
        if host_need > host:
            raise UsageError(
                f"{d.world_size} ranks need about {host_need / GB:.1f} GB of host memory "
                f"({PROCESS_BASELINE_BYTES / GB:.2f} GB per process), but only {host / GB:.1f} GB "
                "is available; start fewer ranks (--nproc)"
            )
    return est.total
