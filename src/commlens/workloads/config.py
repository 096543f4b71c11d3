"""The job ``commlens run``'s options describe, with its backend chosen for this host."""

from __future__ import annotations

import argparse

from commlens.errors import UsageError
from commlens.job.options import RUN, job_from_args
from commlens.job.spec import Job


def resolve_backend(choice: str, nproc: int) -> str:
    """gloo or nccl: ``auto`` is nccl when there is a GPU per rank; nccl without one
    is a :class:`UsageError`."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "nccl" and gpus < nproc:
        raise UsageError(f"--backend nccl needs a GPU per rank: {nproc} ranks, {gpus} GPUs")
    if choice == "auto":
        return "nccl" if gpus >= nproc else "gloo"
    return choice


def workload_from_options(args: argparse.Namespace) -> Job:
    """The job that ``commlens run``'s flags (or a sweep point's keys) describe; a
    UsageError for any bad combination."""
    return job_from_args(args, RUN, backend=resolve_backend(args.backend, args.nproc))
