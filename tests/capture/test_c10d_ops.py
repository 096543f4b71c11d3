"""Every c10d op issued while a capture is on is recorded exactly once.

Held against torch.profiler's ``c10d::`` records (an independent observer:
one per dispatcher call) on real ranks: DDP's wrap-time checks and bucket
rebuilds (issued by its C++ reducer), its gradient buckets, ops issued from
C++ (``torch.ops.c10d.*`` called directly, bypassing torch.distributed's
API) and ordinary Python-API calls, which pass through the dispatcher too
and must not be counted twice.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.distributed import event_rows, run_ranks

# profiler record -> commlens op
_OPS = {
    "c10d::allreduce_": "all_reduce",
    "c10d::allgather_": "all_gather",
    "c10d::_allgather_base_": "all_gather",
    "c10d::_reduce_scatter_base_": "reduce_scatter",
    "c10d::broadcast_": "broadcast",
    "c10d::alltoall_base_": "all_to_all",
    "c10d::send": "send",
    "c10d::recv_": "recv",
    "c10d::barrier": "barrier",
}
_Work = torch._C._distributed_c10d.Work


def _cpp_ops(rank: int, world: int) -> None:
    """Ops issued from C++: straight at the dispatcher, as a C++ extension
    would, and through the process group's own (C++) methods."""
    group = dist.distributed_c10d._get_default_group()
    pg = group.boxed()
    ops = torch.ops.c10d
    t = torch.ones(6)
    group.allreduce([t]).wait()
    group._reduce_scatter_base(torch.empty(6), torch.ones(6 * world)).wait()
    works = [
        ops._allgather_base_(torch.empty(6 * world), t, pg, True, -1)[1],
        ops.broadcast_([torch.ones(3, dtype=torch.int64)], pg, 0, 0, True, -1)[1],
        ops.alltoall_base_(torch.empty(2 * world), torch.ones(2 * world), pg, [], [], True, -1),
    ]
    peer = (rank + 1) % world
    if rank % 2 == 0:
        works.append(ops.send([torch.ones(5)], pg, peer, 0))
        works.append(ops.recv_([torch.empty(5)], pg, (rank - 1) % world, 0))
    else:
        works.append(ops.recv_([torch.empty(5)], pg, (rank - 1) % world, 0))
        works.append(ops.send([torch.ones(5)], pg, peer, 0))
    for work in works:
        _Work.unbox(work).wait()


def _job(rank: int, world: int, out: str) -> dict[str, int]:
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile

    with commlens.capture(out):
        dist.init_process_group("gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            model = DDP(
                nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)),
                bucket_cap_mb=0.05,
            )
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(3):
                model(torch.randn(16, 64)).square().mean().backward()
                opt.step()
                opt.zero_grad()
            _cpp_ops(rank, world)
            t = torch.ones(4)
            dist.all_reduce(t)
            dist.all_gather_into_tensor(torch.empty(4 * world), t)
            dist.broadcast(t, 0)
            dist.barrier()
        dist.destroy_process_group()
    seen = collections.Counter(
        _OPS[e.name] for e in prof.events() if e.name.startswith("c10d::") and e.name in _OPS
    )
    other = [e.name for e in prof.events() if e.name.startswith("c10d::") and e.name not in _OPS]
    assert not other, other
    return dict(seen)


_WORLD = 2


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, int]]]:
    out = tmp_path_factory.mktemp("c10d")
    return out, run_ranks(_job, _WORLD, str(out))


def test_every_c10d_op_once_against_the_profiler(
    traced: tuple[Path, list[dict[str, int]]],
) -> None:
    tmp_path, seen = traced
    rows = event_rows(
        tmp_path, "select rank, op, count(*) from events group by rank, op order by rank, op"
    )
    for rank in range(_WORLD):
        ours = {op: n for r, op, n in rows if r == rank}
        assert ours == seen[rank], (rank, ours, seen[rank])


def _named(tmp: Path, where: str) -> list[tuple[Any, ...]]:
    return event_rows(
        tmp,
        "select op, api, dtype, count, count(*) from events where rank = 0 and "
        f"{where} group by all order by all",
    )


def test_ddp_setup_and_rebuild_collectives_are_seen(
    traced: tuple[Path, list[dict[str, int]]],
) -> None:
    tmp_path = traced[0]
    # Wrap time: an all-gather of int64[1] and a broadcast of the int64 shapes
    # (2 x (2 + 1 + 2 + 1) dims of the four parameters), from C++.
    assert _named(tmp_path, "op = 'all_gather' and dtype = 'int64'") == [
        ("all_gather", "c10d", "int64", 1, 1)
    ]
    int64 = _named(tmp_path, "op = 'broadcast' and dtype = 'int64'")
    assert ("broadcast", "c10d", "int64", 12, 1) in int64
    # The bucket rebuild's int32 layouts, broadcast from C++ at the second forward.
    int32 = _named(tmp_path, "op = 'broadcast' and dtype = 'int32'")
    assert int32 and all(api == "c10d" for _, api, *_ in int32)
    assert sum(n for *_, n in int32) == 2
    # The ops issued straight at the dispatcher are c10d's; the Python calls python's.
    python = _named(tmp_path, "api = 'python' and op in ('all_gather', 'barrier')")
    assert [(op, n) for op, _, _, _, n in python] == [("all_gather", 1), ("barrier", 1)]
