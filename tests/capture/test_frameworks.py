"""Traffic that bypasses or wraps the Python API: DDP, FSDP, DTensor, pipelining."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.distributed import event_rows, run_ranks


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64), nn.Linear(64, 8))


def _ddp(rank: int, world: int, out: str, fp16: bool) -> dict[str, Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    calls = {"hook": 0}

    def counting_fp16(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
        calls["hook"] += 1
        return default_hooks.fp16_compress_hook(state, bucket)

    with commlens.capture(out):
        dist.init_process_group("gloo")
        model = DDP(_mlp(), bucket_cap_mb=0.05)
        if fp16:
            model.register_comm_hook(dist.group.WORLD, counting_fp16)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(rank)
        for _ in range(3):
            loss = model(torch.randn(16, 64)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"grad_bytes": grad_bytes, "hook_calls": calls["hook"]}


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_buckets_equal_gradient_bytes(tmp_path: Path, world: int) -> None:
    res = run_ranks(_ddp, world, str(tmp_path), False)
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute(
            "select rank, step, sum(size_bytes), count(*), min(phase), max(phase), min(api), "
            "min(role) from events where op = 'all_reduce' group by rank, step order by rank, step"
        )
        .fetchall()
    )
    assert len(rows) == 3 * world
    for rank, step, nbytes, calls, ph_min, ph_max, api, role in rows:
        assert nbytes == res[rank]["grad_bytes"], (rank, step)
        if step > 0:  # after the rebuild: several buckets under a 50 kB cap
            assert calls > 1
        # Seen at the c10d dispatcher (DDP's C++ reducer); the role from DDP's group.
        assert ph_min == ph_max == "backward" and api == "c10d" and role == "dp"


def test_ddp_user_hook_keeps_running_and_is_captured_at_half_size(tmp_path: Path) -> None:
    res = run_ranks(_ddp, 2, str(tmp_path), True)
    assert all(r["hook_calls"] > 0 for r in res)
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute(
            "select rank, step, sum(size_bytes), min(dtype) from events "
            "where op = 'all_reduce' group by rank, step"
        )
        .fetchall()
    )
    for rank, _step, nbytes, dtype in rows:
        assert dtype == "float16"
        assert nbytes == res[rank]["grad_bytes"] // 2


def _direct_group_call(rank: int, world: int, out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    with commlens.capture(out):
        dist.init_process_group("gloo")
        DDP(_mlp())(torch.randn(4, 64)).sum().backward()  # a DDP module: the c10d kernel is in
        group = dist.group.WORLD
        assert group is not None
        if rank == 1:
            time.sleep(1.5)  # rank 0 waits for it
        work = group.allreduce([torch.ones(10), torch.ones(10)])  # C++ API, two tensors
        commlens.step()  # the op belongs to step 0, where it was issued
        work.wait()
        dist.destroy_process_group()


def test_process_group_call_read_later_keeps_its_sizes_step_and_wait(tmp_path: Path) -> None:
    run_ranks(_direct_group_call, 2, str(tmp_path))
    rows = event_rows(
        tmp_path,
        "select rank, count, bytes_in, size_bytes, step, t_wait_ns, t_end_ns - t_issue_ns "
        "from events where op = 'all_reduce' and api = 'c10d' and count = 20 order by rank",
    )
    assert [r[:5] for r in rows] == [(rank, 20, 80, 80, 0) for rank in (0, 1)]
    (_, *_, wait0, took0), (_, *_, wait1, took1) = rows
    assert wait0 > 0.75e9 and took0 > 0.75e9  # rank 0 waited for rank 1's late call
    assert wait1 < 0.75e9 and 0 < took1 < 0.75e9  # half the delay: room for a busy machine


def _last_backward_then_destroy(rank: int, world: int, out: str) -> int:
    from torch.nn.parallel import DistributedDataParallel as DDP

    with commlens.capture(out):
        dist.init_process_group("gloo")
        model = DDP(_mlp(), bucket_cap_mb=0.05)
        model(torch.randn(4, 64)).sum().backward()  # no optimizer step, no wait from Python
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        dist.destroy_process_group()  # before the capture ends: the group is gone at close
    return grad_bytes


def test_buckets_still_unwritten_when_the_group_is_destroyed_are_kept(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    grad_bytes = run_ranks(_last_backward_then_destroy, 2, str(tmp_path))
    assert "recording stopped" not in capfd.readouterr().err
    rows = event_rows(
        tmp_path,
        "select rank, sum(size_bytes), min(pg_ranks), min(role) from events "
        "where op = 'all_reduce' and api = 'c10d' group by rank order by rank",
    )
    assert [(r, b, list(g), role) for r, b, g, role in rows] == [
        (rank, grad_bytes[rank], [0, 1], "dp") for rank in (0, 1)
    ]


def _ddp_result(rank: int, world: int, out: str | None) -> list[float]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train() -> list[float]:
        dist.init_process_group("gloo")
        model = DDP(_mlp(), bucket_cap_mb=0.05)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(rank)
        for _ in range(2):
            model(torch.randn(16, 64)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
        return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()

    if out is None:
        return train()
    with commlens.capture(out):
        return train()


@pytest.mark.parametrize("world", [2, 3])  # 3: DDP's 1/n is not exact in binary
def test_tracing_changes_no_numbers(tmp_path: Path, world: int) -> None:
    plain = run_ranks(_ddp_result, world, None)
    traced = run_ranks(_ddp_result, world, str(tmp_path))
    assert plain == traced  # bit-identical parameters
    run = commlens.load_run(tmp_path)
    assert run.events.num_rows > 0 and set(run.events.column("api").to_pylist()) >= {"c10d"}


def _fsdp(rank: int, world: int, out: str, kind: str) -> dict[str, int]:
    warnings.simplefilter("ignore")
    with commlens.capture(out):
        dist.init_process_group("gloo")
        model = _mlp()
        numel = sum(p.numel() for p in model.parameters())
        if kind == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer)
            fully_shard(model)
        else:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp import ShardingStrategy

            model = FSDP(
                model,
                sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
                use_orig_params=True,
                device_id=torch.device("cpu"),
            )
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(8, 64)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
    return {"numel": numel}


@pytest.mark.parametrize("kind", ["fsdp2", "fsdp1"])
def test_fsdp_gathers_and_scatters_match_parameter_shards(tmp_path: Path, kind: str) -> None:
    world = 2
    res = run_ranks(_fsdp, world, str(tmp_path), kind)
    full_bytes = res[0]["numel"] * 4  # no padding: every unit divides evenly by 2
    con = commlens.load_run(tmp_path).duckdb()
    bad = con.execute(
        "select count(*) from events where (op = 'all_gather' and bytes_in * ? != size_bytes) "
        "or (op = 'reduce_scatter' and bytes_out * ? != size_bytes)",
        [world, world],
    ).fetchone()
    assert bad == (0,)  # each rank contributes or keeps exactly its 1/n shard
    sums = con.execute(
        "select rank, step, "
        "sum(size_bytes) filter (op = 'all_gather' and phase = 'forward'), "
        "sum(size_bytes) filter (op = 'all_gather' and phase = 'backward'), "
        "sum(size_bytes) filter (op = 'reduce_scatter') "
        "from events group by all order by all"
    ).fetchall()
    assert len(sums) == world * 2
    for _rank, _step, ag_fwd, ag_bwd, rs in sums:
        assert ag_fwd == full_bytes and rs == full_bytes
        if kind == "fsdp1":  # SHARD_GRAD_OP keeps parameters gathered through backward
            assert ag_bwd is None
        else:  # fully_shard reshards after forward and gathers again in backward
            assert 0 < ag_bwd <= full_bytes


def _dtensor_tp(rank: int, world: int, out: str) -> dict[str, int]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    warnings.simplefilter("ignore")
    with commlens.capture(out):
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        counts: dict[str, int] = {}
        for _ in range(2):
            debug = CommDebugMode()  # the independent counter, one per iteration
            with debug:
                x = torch.randn(4, 32, requires_grad=True)
                model(x).sum().backward()
            for k, v in debug.get_comm_counts().items():
                counts[str(k)] = counts.get(str(k), 0) + int(v)
        dist.destroy_process_group()
    return counts


def test_dtensor_tp_all_reduces_forward_and_backward(tmp_path: Path) -> None:
    res = run_ranks(_dtensor_tp, 2, str(tmp_path))
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute(
            "select rank, phase, count(*) from events where op = 'all_reduce' "
            "and api = 'functional' group by all order by all"
        )
        .fetchall()
    )
    for rank in range(2):
        expected = sum(v for k, v in res[rank].items() if "all_reduce" in k)
        got = {phase: n for r, phase, n in rows if r == rank}
        assert expected > 0 and sum(got.values()) == expected, (got, res[rank])
        assert got.get("forward", 0) > 0 and got.get("backward", 0) > 0, got
    roles = run.duckdb().execute("select distinct role from events").fetchall()
    assert roles == [("tp",)]


def _pipeline(rank: int, world: int, out: str) -> int:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    warnings.simplefilter("ignore")
    with commlens.capture(out):
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        stages = [nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(world)]
        stage = PipelineStage(stages[rank], rank, world, torch.device("cpu"))
        schedule = ScheduleGPipe(
            stage, n_microbatches=4, loss_fn=lambda out, tgt: out.square().mean()
        )
        x = torch.randn(8, 16)
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=torch.zeros(8, 16))
        else:
            schedule.step()
        dist.destroy_process_group()
    return rank


def test_pipelining_gpipe_sends_and_receives_with_peers(tmp_path: Path) -> None:
    world = 2
    run_ranks(_pipeline, world, str(tmp_path))
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute(
            "select rank, op, peer, count(*), min(size_bytes) from events "
            "where op in ('send', 'recv') and dtype = 'float32' group by all order by all"
        )
        .fetchall()
    )
    by = {(r, op): (peer, n, size) for r, op, peer, n, size in rows}
    # The stages first agree on shapes (small int32 and object messages).
    meta = (
        run.duckdb()
        .execute("select count(*) from events where op like '%_object' or dtype = 'int32'")
        .fetchone()
    )
    assert meta is not None and meta[0] > 0
    # 4 micro-batches: activations forward 0→1, gradients backward 1→0.
    assert by[(0, "send")][:2] == (1, 4) and by[(1, "recv")][:2] == (0, 4)
    assert by[(1, "send")][:2] == (0, 4) and by[(0, "recv")][:2] == (1, 4)
    assert by[(0, "send")][2] == 2 * 16 * 4  # micro-batch of 2 rows × 16 floats
