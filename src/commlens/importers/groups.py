"""Process groups as other tools write them: rank lists (possibly cut short) and roles.

Shared by every reader: :func:`parse_ranks` reads ``"[0, 1, 2]"`` and lists
cut past 30 entries (``"[0, 1, ..., 127]"``), :func:`rebuild_ranks` makes
them whole from a start and stride, :func:`role_of` names a group's role
from its description (Megatron's ``TENSOR_MODEL_PARALLEL_GROUP``,
DeviceMesh's ``mesh_tp``, ...).
"""

from __future__ import annotations

import json
import re
from typing import Any

_ROLE_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Order matters: "expert data parallel" is ep before dp; "tensor and data" is tp.
    ("ep", ("expert", "moe", "_ep", "mesh_ep", "ep_")),
    ("cp", ("context", "mesh_cp", "_cp")),
    ("pp", ("pipeline", "embedding", "position_embedding", "mesh_pp", "_pp", "pp_")),
    ("tp", ("tensor", "mesh_tp", "_tp", "tp_", "model_parallel")),
    ("dp", ("data", "fsdp", "ddp", "mesh_dp", "_dp", "dp_", "shard", "replicate")),
)


MEGATRON_ROLES = {
    "DATA_PARALLEL_GROUP": "dp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "INTER_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": "dp",
    "TENSOR_AND_DATA_PARALLEL_GROUP": "dp",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "EXPERT_DATA_PARALLEL_GROUP": "dp",
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "MODEL_PARALLEL_GROUP": "tp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "cp",
    "HIERARCHICAL_CONTEXT_PARALLEL_GROUPS": "cp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "EMBEDDING_GROUP": "pp",
    "POSITION_EMBEDDING_GROUP": "pp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "ep",
}
"""Megatron-LM's group descriptions -> the role of the traffic on them: a group of
data-parallel replicas (with context-parallel ranks, of experts, of the distributed
optimizer) is dp; tensor x pipeline (MODEL_PARALLEL) carries tp's reductions."""


def role_of(desc: str) -> str:
    """dp, tp, pp, ep, cp, or "" from a group's description (name or desc):
    Megatron's names exactly, else words (DeviceMesh's mesh_tp, "expert", ...)."""
    exact = MEGATRON_ROLES.get(desc.strip().upper())
    if exact:
        return exact
    text = desc.strip().lower()
    if text in ("", "default_pg", "undefined", "world"):
        return ""
    if text in ("dp", "tp", "pp", "ep", "cp"):
        return text
    for role, words in _ROLE_WORDS:
        if any(w in text for w in words):
            return role
    return ""


def parse_ranks(value: Any) -> tuple[tuple[int, ...], bool]:
    """(ranks, whether the list was cut short) from a list or its string form."""
    if isinstance(value, list):
        return tuple(int(v) for v in value if isinstance(v, int)), False
    if not isinstance(value, str):
        return (), False
    text = value.strip()
    cut = "..." in text or "…" in text
    try:
        if not cut:
            parsed = json.loads(text)
            if isinstance(parsed, list):
                return tuple(int(v) for v in parsed if isinstance(v, int)), False
    except ValueError:
        pass
    return tuple(int(v) for v in re.findall(r"-?\d+", text)), cut


def rebuild_ranks(start: Any, stride: Any, size: int) -> tuple[int, ...] | None:
    """The ranks start, start + stride, ... (``size`` of them); None when unknown."""
    if isinstance(start, int) and isinstance(stride, int) and stride > 0 and size > 0:
        return tuple(start + i * stride for i in range(size))
    return None
