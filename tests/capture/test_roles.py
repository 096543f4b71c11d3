"""One group, one role for the whole run, named with no annotation.

Real ranks (gloo): DDP's group is dp from its constructor's first
collective on; a torchtitan-style world mesh split into named axes gives the
default group the role of the axis that spans all ranks; batch/loss meshes,
FSDP2, ZeroRedundancyOptimizer and a pipeline stage name theirs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import commlens
from commlens.capture.groups import role_from_text
from tests.distributed import event_rows, run_ranks


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("dp", "dp"), ("dp_shard", "dp"), ("dp_replicate", "dp"), ("fsdp", "dp"),
        ("hsdp", "dp"), ("batch", "dp"), ("loss", "dp"), ("dp_shard_cp", "dp"),
        ("cp", "cp"), ("ep", "ep"), ("pp", "pp"), ("tp", "tp"), ("world", ""),
    ],
)  # fmt: skip
def test_mesh_dim_names_in_common_use(name: str, role: str) -> None:
    assert role_from_text(name) == role


def _frameworks(rank: int, world: int, out: str) -> None:
    import sys

    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    with commlens.capture(out):
        # Imported once the capture runs: patched as it is imported.
        assert "torch.distributed.pipelining.stage" not in sys.modules
        from torch.distributed.pipelining import PipelineStage

        dist.init_process_group("gloo")
        zero_group = dist.new_group([0, 1])
        pipe_group = dist.new_group([0, 1])
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4)))
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
        opt = ZeroRedundancyOptimizer(
            nn.Linear(8, 8).parameters(), torch.optim.SGD, process_group=zero_group, lr=0.1
        )
        opt.step()
        PipelineStage(nn.Linear(4, 4), rank, world, torch.device("cpu"), group=pipe_group)
        dist.all_reduce(torch.ones(2), group=pipe_group)
        dist.destroy_process_group()


def _roles(out: Path) -> dict[str, set[str]]:
    rows = event_rows(out, "select distinct pg_name, role from events")
    roles: dict[str, set[str]] = {}
    for name, role in rows:
        roles.setdefault(name, set()).add(role)
    return roles


def _meta_roles(out: Path, rank: int) -> dict[str, Any]:
    meta = json.loads((out / f"rank-{rank:05d}.json").read_text())
    return dict(meta["meta"]["group_roles"])


def test_ddp_zero_and_pipeline_stage_name_their_groups(tmp_path: Path) -> None:
    run_ranks(_frameworks, 2, str(tmp_path))
    roles = _roles(tmp_path)
    # DDP's wrap-time checks, rebuilds and buckets: one role, from the first event.
    default = event_rows(
        tmp_path, "select distinct pg_name from events where api = 'c10d' and op = 'all_gather'"
    )[0][0]
    assert roles.pop(default) == {"dp"}
    assert sorted(roles.values(), key=sorted) == [{"dp"}, {"pp"}]
    assert _meta_roles(tmp_path, 0)[default] == "dp"


def _titan(rank: int, world: int, out: str, axis: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    with commlens.capture(out):
        dist.init_process_group("gloo")
        world_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("world",))
        sizes = {"pp": 1, "dp_shard": 1, "tp": 1, axis: world}
        mesh = world_mesh._unflatten(0, tuple(sizes.values()), tuple(sizes))
        loss = mesh["dp_shard"]._flatten("loss")
        t = torch.ones(4)
        if axis == "dp_shard":
            torch.manual_seed(0)
            model = fully_shard(nn.Linear(8, 8), mesh=mesh["dp_shard"])
            model(torch.randn(2, 8)).sum().backward()
            dist.all_reduce(t, group=loss.get_group())
        else:
            dist.all_reduce(t, group=mesh[axis].get_group())
        dist.destroy_process_group()


@pytest.mark.parametrize(("axis", "role"), [("dp_shard", "dp"), ("tp", "tp")])
def test_world_mesh_axes_spanning_all_ranks_name_the_default_group(
    tmp_path: Path, axis: str, role: str
) -> None:
    run_ranks(_titan, 2, str(tmp_path), axis)
    rows = event_rows(tmp_path, "select distinct role, group_size from events")
    assert rows == [(role, 2)]


def test_deepspeed_engine_names_its_groups(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    from tests.frameworks.deepspeed_job import job

    run_ranks(job, 2, str(tmp_path), 1)
    roles = _roles(tmp_path)
    meta = _meta_roles(tmp_path, 0)
    assert roles and meta
    for name, seen in roles.items():
        # Each group one role: in the events, or for events written before
        # DeepSpeed built its engine, in the rank's final table.
        assert seen - {""} <= {"dp"} and meta.get(name) == "dp", (name, seen, meta)
