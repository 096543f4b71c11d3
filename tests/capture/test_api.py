"""Every Python-API op is recorded exactly once, with the right sizes, group and peer."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import commlens
from tests.distributed import event_rows, run_ranks

N = 1000  # elements per rank buffer
B = N * 4  # float32 bytes


def _all_ops(rank: int, world: int, out: str) -> list[tuple[Any, ...]]:
    """Issue every op; return what an independent count expects, in order."""
    warnings.simplefilter("ignore", FutureWarning)
    exp: list[tuple[Any, ...]] = []
    everyone = list(range(world))

    def want(
        op: str,
        b_in: int,
        b_out: int,
        size: int,
        ranks: list[int],
        peer: int | None,
        is_async: bool = False,
    ) -> None:
        exp.append((op, b_in, b_out, size, ranks, len(ranks), peer, is_async))

    with commlens.capture(out):
        dist.init_process_group("gloo")
        t = torch.ones(N)
        dist.all_reduce(t)
        want("all_reduce", B, B, B, everyone, None)
        dist.all_reduce(t, async_op=True).wait()
        want("all_reduce", B, B, B, everyone, None, True)
        dist.all_gather([torch.zeros(N) for _ in range(world)], t)
        want("all_gather", B, B * world, B * world, everyone, None)
        dist.all_gather_into_tensor(torch.zeros(N * world), t)
        want("all_gather", B, B * world, B * world, everyone, None)
        dist.all_gather_single(torch.zeros(N * world), t)
        want("all_gather", B, B * world, B * world, everyone, None)
        dist.reduce_scatter_tensor(torch.zeros(N), torch.ones(N * world))
        want("reduce_scatter", B * world, B, B * world, everyone, None)
        dist.reduce_scatter_single(torch.zeros(N), torch.ones(N * world))
        want("reduce_scatter", B * world, B, B * world, everyone, None)
        dist.all_to_all_single(torch.zeros(N * world), torch.ones(N * world))
        want("all_to_all", B * world, B * world, B * world, everyone, None)
        dist.all_to_all(
            [torch.zeros(N) for _ in range(world)], [torch.ones(N) for _ in range(world)]
        )
        want("all_to_all", B * world, B * world, B * world, everyone, None)
        dist.broadcast(t, src=world - 1)
        want("broadcast", B, B, B, everyone, world - 1)
        dist.reduce(t, dst=0)
        want("reduce", B, B, B, everyone, 0)
        gl = [torch.zeros(N) for _ in range(world)] if rank == 0 else None
        dist.gather(t, gl, dst=0)
        want("gather", B, B * world if rank == 0 else 0, B * world, everyone, 0)
        sl = [torch.ones(N) for _ in range(world)] if rank == 0 else None
        dist.scatter(t, sl, src=0)
        want("scatter", B * world if rank == 0 else 0, B, B * world, everyone, 0)
        # Blocking p2p around a ring: send → isend internally, recorded once.
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        if rank % 2 == 0:
            dist.send(t, nxt)
            dist.recv(t, prv)
        else:
            dist.recv(t, prv)
            dist.send(t, nxt)
        for op in (
            (("send", nxt), ("recv", prv)) if rank % 2 == 0 else (("recv", prv), ("send", nxt))
        ):
            want(
                op[0], B if op[0] == "send" else 0, 0 if op[0] == "send" else B, B, everyone, op[1]
            )
        ops = [dist.P2POp(dist.isend, t, nxt), dist.P2POp(dist.irecv, torch.zeros(N), prv)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        want("send", B, 0, B, everyone, nxt, True)
        want("recv", 0, B, B, everyone, prv, True)
        # A sub-group of the first two ranks: group size, not world size.
        pair = dist.new_group([0, 1])
        if rank < 2:
            dist.all_reduce(t, group=pair)
            want("all_reduce", B, B, B, [0, 1], None)
            dist.broadcast(t, group=pair, group_src=1)
            want("broadcast", B, B, B, [0, 1], 1)
        objs: list[Any] = [None] * world
        dist.all_gather_object(objs, {"rank": rank})
        exp.append(("all_gather_object",))
        box = [1, 2, 3] if rank == 0 else [None, None, None]
        dist.broadcast_object_list(box, src=0)
        exp.append(("broadcast_object",))
        dist.barrier()
        want("barrier", 0, 0, 0, everyone, None)
        dist.destroy_process_group()
    return exp


@pytest.mark.parametrize("world", [2, 4])
def test_every_op_recorded_once(tmp_path: Path, world: int) -> None:
    expected = run_ranks(_all_ops, world, str(tmp_path))
    run = commlens.load_run(tmp_path)
    assert run.world_size == world and not run.missing_ranks and not run.warnings
    con = run.duckdb()
    for rank in range(world):
        rows = con.execute(
            "select op, bytes_in, bytes_out, size_bytes, pg_ranks, group_size, peer, is_async "
            "from events where rank = ? order by seq",
            [rank],
        ).fetchall()
        assert len(rows) == len(expected[rank]), (rank, rows)
        for got, want in zip(rows, expected[rank], strict=True):
            if len(want) == 1:  # object collectives: op only (sizes are pickles)
                assert got[0] == want[0] and got[3] > 0
            else:
                assert tuple(got[:4]) == want[:4], (rank, got, want)
                assert list(got[4]) == want[4] and got[5] == want[5]
                assert got[6] == want[6] and got[7] == want[7], (rank, got, want)
    # Ranks that ran outside a step and any module: phase other, step 0.
    phases = con.execute("select distinct phase, step from events").fetchall()
    assert phases == [("other", 0)]
    assert run.manifest["world_size"] == world
    assert all(m["status"] == "ok" for m in run.manifest["ranks"].values())


def _async_overlap(rank: int, world: int, out: str) -> None:
    with commlens.capture(out):
        dist.init_process_group("gloo")
        big = torch.ones(4_000_000)
        work = dist.all_reduce(big, async_op=True)
        a = torch.randn(300, 300)
        for _ in range(5):  # compute while the all-reduce is in flight
            a = a @ a.T / 300
        work.wait()
        dist.destroy_process_group()


def test_async_op_timed_to_completion(tmp_path: Path) -> None:
    run_ranks(_async_overlap, 2, str(tmp_path))
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute("select t_issue_ns, t_end_ns, t_wait_ns, duration_s, is_async from events")
        .fetchall()
    )
    assert len(rows) == 2
    for issue, end, wait, duration, is_async in rows:
        assert is_async and issue < end
        assert 0 <= wait <= end - issue
        assert duration == pytest.approx((end - issue) / 1e9)


def _late_wait(rank: int, world: int, out: str) -> None:
    with commlens.capture(out):
        dist.init_process_group("gloo")
        waited = dist.all_reduce(torch.ones(16), async_op=True)
        unwaited = dist.all_reduce(torch.ones(16), async_op=True)
        time.sleep(1.5)  # both complete long before anyone looks
        waited.wait()
        dist.barrier()
        unwaited.get_future().wait()
        dist.destroy_process_group()


def test_async_op_ends_when_it_completes_not_when_waited(tmp_path: Path) -> None:
    """Completion is stamped by the op's own callback: a late wait() does not stretch it."""
    run_ranks(_late_wait, 2, str(tmp_path))
    rows = event_rows(
        tmp_path,
        "select rank, seq, t_end_ns - t_issue_ns, t_wait_ns from events "
        "where op = 'all_reduce' order by rank, seq",
    )
    assert len(rows) == 4  # two per rank, the un-waited one too
    for _, _, took, wait in rows:
        assert 0 < took < 0.75e9 and wait < 0.75e9  # half the late look: room for a busy machine
