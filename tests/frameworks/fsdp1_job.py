"""FSDP1 (``FullyShardedDataParallel``) jobs on gloo (CPU), no annotation: FULL_SHARD
on the default group, and HYBRID_SHARD over a tuple of groups, over an unnamed 2-D
device mesh and over the intra-/inter-node groups it builds itself."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.frameworks.observe import profiled_ops


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _train(model: nn.Module, steps: int = 2) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()


def _groups(fsdp: Any) -> dict[str, list[int]]:
    """The groups an FSDP1 module says it uses, by name: its shard group and, for
    HYBRID_SHARD, its replicate (inter-node) group."""
    out = {}
    for group in (fsdp.process_group, getattr(fsdp, "_inter_node_pg", None)):
        if group is not None:
            out[group.group_name] = dist.get_process_group_ranks(group)
    return out


def job(rank: int, world: int, out: str) -> tuple[dict[str, int], dict[str, list[int]], str]:
    """Per rank: (profiler's c10d calls per op, FSDP's groups, a group no framework uses)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.profiler import ProfilerActivity, profile

    cpu = torch.device("cpu")
    hybrid = ShardingStrategy.HYBRID_SHARD
    with commlens.capture(out):
        dist.init_process_group("gloo")
        half = world // 2
        rows = [dist.new_group(list(range(i * half, (i + 1) * half))) for i in range(2)]
        cols = [dist.new_group(list(range(i, world, half))) for i in range(half)]
        other = dist.new_group(list(range(world)))
        mesh = init_device_mesh("cpu", (2, half))  # no dimension names
        pair = (rows[rank // half], cols[rank % half])  # (shard, replicate)
        groups: dict[str, list[int]] = {}
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for kwargs in (
                {},  # FULL_SHARD on the default group
                {"sharding_strategy": hybrid, "process_group": pair},
                {"sharding_strategy": hybrid, "device_mesh": mesh},
                # it builds its own groups (the policy wraps no submodule)
                {"sharding_strategy": hybrid, "auto_wrap_policy": ModuleWrapPolicy({nn.Conv1d})},
            ):
                model = FSDP(_model(), device_id=cpu, **kwargs)
                _train(model)
                groups.update(_groups(model))
            dist.all_reduce(torch.ones(2), group=other)
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return seen, groups, other.group_name
