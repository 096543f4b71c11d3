"""What data-parallel wrappers were given: their gradient elements, by group.

DDP, each FSDP2 parameter group (``fully_shard``) and DeepSpeed's engine are
noted when built, with the group their gradients are reduced over and the
number of gradient elements one synced step reduces there (FSDP2: the padded
unsharded size its reduce-scatter takes). The rank json keeps them as
``meta.wrapped``: ``{"groups": {pg_name: {"elements": n, "params": k, "by":
[...], "ranks": [...]}}}``, from which ``validate`` forms "gradient bytes per synced step =
the wrapped parameters' gradients".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from commlens.capture.intercept import ACTIVE

WRAPPED_KEY = "wrapped"


def note(by: str, group: Any, elements: int, params: int) -> None:
    """Add ``elements`` gradient elements of ``params`` parameters reduced over ``group``
    (None: the default group), wrapped by ``by``. Never breaks the caller."""
    rec = ACTIVE.recorder
    if rec is None or rec.disabled or params == 0:
        return
    try:
        info = rec.groups.info(group)
        name = info.name
        wrapped = dict(rec.meta.get(WRAPPED_KEY) or {"groups": {}})
        groups = dict(wrapped["groups"])
        entry = dict(groups.get(name) or {"elements": 0, "params": 0, "by": []})
        entry["ranks"] = [int(r) for r in info.ranks]
        entry["elements"] += int(elements)
        entry["params"] += int(params)
        if by not in entry["by"]:
            entry["by"] = [*entry["by"], by]
        groups[name] = entry
        rec.meta[WRAPPED_KEY] = {**wrapped, "groups": groups}
    except Exception as exc:
        rec.fail(exc)


def trained(params: Iterable[Any]) -> list[Any]:
    """The parameters that get gradients, each once."""
    seen: dict[int, Any] = {}
    for p in params:
        if getattr(p, "requires_grad", False):
            seen.setdefault(id(p), p)
    return list(seen.values())


def numel(param: Any) -> int:
    """Elements of a parameter, DeepSpeed ZeRO-3's partitioned ones at their full size."""
    full = getattr(param, "ds_numel", None)
    return int(full) if isinstance(full, int) else int(param.numel())


def ddp_built(ddp: Any) -> None:
    """A DDP module was built: its parameters' gradients are all-reduced over its group."""
    params = trained(getattr(ddp, "_module_parameters", None) or ddp.module.parameters())
    note("ddp", ddp.process_group, sum(numel(p) for p in params), len(params))


def fsdp2_group_built(group: Any) -> None:
    """An FSDP2 parameter group was built: its reduce-scatter takes every gradient,
    padded to a whole number of shards."""
    info = group.mesh_info
    shards = int(getattr(info, "shard_mesh_size", 1) or 1)
    params = [p for p in group.fsdp_params if p.sharded_param.requires_grad]
    elements = sum(p.padded_sharded_param_size.numel() * shards for p in params)
    note("fsdp2", info.shard_process_group, elements, len(params))


def deepspeed_built(engine: Any) -> None:
    """A DeepSpeed engine was built: its module's gradients are reduced over its ZeRO
    optimizer's group (ZeRO-3's is its parameters'), else its data-parallel group."""
    optimizer: Any = getattr(engine, "optimizer", None)
    if hasattr(optimizer, "dp_process_group"):
        group = optimizer.dp_process_group
    else:
        group = getattr(engine, "seq_data_parallel_group", None) or getattr(
            engine, "data_parallel_group", None
        )
    params = trained(engine.module.parameters())
    note("deepspeed", group, sum(numel(p) for p in params), len(params))
