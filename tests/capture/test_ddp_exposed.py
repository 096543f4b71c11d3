"""DDP's exposed time: how long its buckets hold ``backward()``.

Probe: rank 1 reaches each backward pass late, so rank 0's ``backward()``
blocks on the last buckets' all-reduces; rank 0 times its ``backward()`` with
the buckets synced and, for the same computation without communication,
under ``no_sync()``. The difference is what its buckets' ``t_wait_ns`` must
add up to.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.distributed import event_rows, run_ranks

_STEPS = 4
_LATE_S = 0.15


def _job(rank: int, world: int, out: str) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    x = torch.randn(32, 256)
    synced: list[int] = []
    local: list[int] = []
    with commlens.capture(out):
        dist.init_process_group("gloo")
        ddp = DDP(model, bucket_cap_mb=0.25)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for _ in range(_STEPS):
            with ddp.no_sync():  # the same computation, no buckets
                loss = ddp(x).square().mean()
                t0 = time.perf_counter_ns()
                loss.backward()
                local.append(time.perf_counter_ns() - t0)
            loss = ddp(x).square().mean()
            if rank == 1:
                time.sleep(_LATE_S)
            t0 = time.perf_counter_ns()
            loss.backward()
            synced.append(time.perf_counter_ns() - t0)
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
    return {"synced": synced, "local": local}


def test_ddp_buckets_wait_is_the_time_backward_is_held(tmp_path: Path) -> None:
    res = run_ranks(_job, 2, str(tmp_path))
    rows = event_rows(
        tmp_path,
        "select step, sum(t_wait_ns), min(t_wait_ns <= t_end_ns - t_issue_ns) "
        "from events where rank = 0 and op = 'all_reduce' and api = 'c10d' "
        "group by step order by step",
    )
    assert [r[0] for r in rows] == list(range(_STEPS))
    local = statistics.median(res[0]["local"][1:])
    # Step 0 is left out: its first synced backward computes for longer (DDP's
    # first iteration), and the late rank may arrive meanwhile.
    for (step, waited, within), synced in list(zip(rows, res[0]["synced"], strict=True))[1:]:
        held = synced - local
        assert held > 0.8 * _LATE_S * 1e9, (step, held)
        # What the buckets held backward() for, to within its computation's noise.
        assert abs(waited - held) < 0.25 * held, (step, waited, held)
        assert within, step  # a bucket waits at most as long as it runs
    # The late rank is hardly held.
    late = event_rows(
        tmp_path, "select sum(t_wait_ns) from events where rank = 1 and api = 'c10d'"
    )[0][0]
    assert late < 0.3 * _LATE_S * 1e9 * _STEPS
