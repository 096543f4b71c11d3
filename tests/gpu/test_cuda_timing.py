"""NCCL ops on CUDA tensors are timed by CUDA events, never by a synchronize per op."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import commlens
from commlens.launch import free_port

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not dist.is_nccl_available(),
    reason="needs a CUDA GPU and NCCL (this machine has neither)",
)


@contextmanager
def _traced_nccl_world_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A one-rank NCCL group, traced into ``tmp_path``."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with commlens.capture(tmp_path):
        dist.init_process_group("nccl", rank=0, world_size=1)
        yield
        dist.destroy_process_group()


def test_nccl_ops_timed_with_cuda_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs = {"n": 0}
    real_sync = torch.cuda.synchronize

    def counting_sync(*args: object, **kwargs: object) -> None:
        syncs["n"] += 1
        real_sync(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.cuda, "synchronize", counting_sync)
    with _traced_nccl_world_of_one(tmp_path, monkeypatch):
        x = torch.ones(16 * 1024 * 1024, device="cuda")
        for _ in range(20):
            dist.all_reduce(x)
    assert syncs["n"] == 0
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute(
            "select count(*), min(duration_s), max(t_wait_ns) from events where op = 'all_reduce'"
        )
        .fetchone()
    )
    assert rows is not None and rows[0] == 20 and rows[1] > 0


def test_async_and_ddp_nccl_ops_timed_on_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Async ops and DDP's buckets end at their device completion, seen from a callback."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _traced_nccl_world_of_one(tmp_path, monkeypatch):
        x = torch.ones(16 * 1024 * 1024, device="cuda")
        for _ in range(10):
            dist.all_reduce(x, async_op=True).wait()
        model = DDP(nn.Linear(1024, 1024).cuda())
        for _ in range(3):
            model(torch.randn(64, 1024, device="cuda")).sum().backward()
        torch.cuda.synchronize()
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute(
            "select api, count(*), min(duration_s), min(t_end_ns - t_issue_ns), max(t_wait_ns) "
            "from events where op = 'all_reduce' and is_async group by api order by api"
        )
        .fetchall()
    )
    by_api = {r[0]: r[1:] for r in rows}
    assert by_api["python"][0] == 10 and by_api["python"][1] > 0
    assert by_api["c10d"][0] >= 3 and by_api["c10d"][1] > 0
    assert all(r[3] == 0 for r in by_api.values())  # nobody waited on the device op
