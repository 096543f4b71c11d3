"""DDP bucket simulation against PyTorch's own assignment and a captured run."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from commlens.job import ParallelDims, get_preset
from commlens.job.spec import Job
from commlens.predict.buckets import assign_buckets, ddp_bucket_bytes
from commlens.predict.exact_dp import rank_params


def _torch_assignment(sizes: list[int], limits: list[int], ordered: bool) -> list[list[int]]:
    tensors = [torch.empty(n // 4, dtype=torch.float32) for n in sizes]
    indices = list(range(len(sizes))) if ordered else []
    buckets, _ = dist._compute_bucket_assignment_by_size(
        tensors, limits, [False] * len(sizes), indices
    )
    return [list(b) for b in buckets]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ordered", [False, True])
def test_assignment_matches_pytorch(seed: int, ordered: bool) -> None:
    rng = random.Random(seed)
    sizes = [4 * rng.randint(1, 3000) for _ in range(rng.randint(1, 60))]
    limits = [4000, 20000] if seed % 2 else [12000]
    ours = assign_buckets(sizes, limits, keep_order=ordered)
    assert ours == _torch_assignment(sizes, limits, ordered)


def test_step0_is_one_bucket_and_bytes_are_conserved() -> None:
    grads = [4 * n for n in (1000, 2_000_000, 7, 5_000_000, 300)]
    assert ddp_bucket_bytes(grads, rebuilt=False) == [sum(grads)]
    rebuilt = ddp_bucket_bytes(grads, rebuilt=True)
    assert sum(rebuilt) == sum(grads) and len(rebuilt) > 1


def test_gpt19m_buckets_match_a_captured_ddp_run() -> None:
    # Captured with commlens (gpt-19m, dp=2, fp32, DDP bucket_cap_mb=25): all-reduce
    # sizes of every step after the rebuild.
    job = Job(get_preset("gpt-19m"), "dp", ParallelDims(2), seq_len=16)
    grads = [4 * int(torch.Size(s).numel()) for _, s in rank_params(job, 0)]
    cap = 25 * 2**20
    assert ddp_bucket_bytes(grads, first_bucket_bytes=cap, bucket_cap_bytes=cap) == [
        29_419_520,
        29_421_568,
        124_037_120,
    ]
