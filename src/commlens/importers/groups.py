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


def role_of(desc: str) -> str:
    """dp, tp, pp, ep, cp, or "" from a group's description (name or desc)."""
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
