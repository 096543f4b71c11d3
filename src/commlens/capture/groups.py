"""Process-group facts for events: name, member ranks, size and role.

The role (dp/tp/pp/ep/cp) comes from, in order: ``commlens.set_group_role``,
the group's description (``new_group(group_desc="tp")``, DeviceMesh's
``mesh_<dim>``), the name of a DeviceMesh dimension whose group it is (a
dimension spanning all ranks reuses the default group), and the framework
that uses it (DDP, FSDP, ZeRO and DeepSpeed: dp; pipeline stages: pp).

One group has one role for the whole run (conventions §9): the frameworks
name theirs before their first collective, and :meth:`GroupRegistry.roles`
gives the final role of every group seen, which the rank's metadata keeps
(``group_roles``); the reader gives it to every event of the group
(:mod:`commlens.trace.roles`), those written before the role was known too.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

_ROLE_TOKENS = {
    "dp": "dp",
    "ddp": "dp",
    "data": "dp",
    "fsdp": "dp",
    "zero": "dp",
    "shard": "dp",
    "replicate": "dp",
    "hsdp": "dp",
    "batch": "dp",
    "loss": "dp",
    "edp": "dp",
    "efsdp": "dp",
    "tp": "tp",
    "tensor": "tp",
    "mp": "tp",
    "pp": "pp",
    "pipe": "pp",
    "pipeline": "pp",
    "ep": "ep",
    "expert": "ep",
    "cp": "cp",
    "context": "cp",
}


@dataclass(frozen=True)
class GroupInfo:
    name: str
    ranks: tuple[int, ...]
    size: int
    role: str


class GroupRegistry:
    """Caches GroupInfo per process group object and holds explicit roles."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, GroupInfo]] = {}
        self._roles: dict[int, tuple[Any, str]] = {}
        self._suggested: dict[int, tuple[Any, str]] = {}  # the last resort (DDP's dp)
        self._meshes: list[weakref.ref[Any]] = []
        self._seen: dict[int, Any] = {}  # every group looked up, by id
        # Called whenever a group's name or role may read differently now.
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def add_mesh(self, mesh: Any) -> None:
        """A DeviceMesh whose dimension names may name its groups' roles."""
        self._meshes.append(weakref.ref(mesh))
        self._cache.clear()
        self._changed()

    def set_role(self, group: Any, role: str) -> None:
        self._store_role(self._roles, group, role)

    def suggest_role(self, group: Any, role: str) -> None:
        """A role to use when neither the caller nor the group's description names one."""
        self._store_role(self._suggested, group, role)

    def _store_role(self, store: dict[int, tuple[Any, str]], group: Any, role: str) -> None:
        if group is None or group is dist.group.WORLD:
            group = dist.distributed_c10d._get_default_group()
        store[id(group)] = (group, role)
        self._cache.pop(id(group), None)
        self._cache.pop(0, None)
        self._changed()

    def info(self, group: Any) -> GroupInfo:
        if group is None:
            hit = self._cache.get(0)
            if hit is not None:
                return hit[1]
            info = self.info(dist.distributed_c10d._get_default_group())
            self._cache[0] = (None, info)
            return info
        if group is dist.group.WORLD:
            group = dist.distributed_c10d._get_default_group()
        hit = self._cache.get(id(group))
        if hit is not None and hit[0] is group:
            return hit[1]
        ranks = tuple(int(r) for r in dist.get_process_group_ranks(group))
        try:
            name = str(group.group_name)
        except Exception:
            name = ""
        info = GroupInfo(name=name, ranks=ranks, size=len(ranks), role=self._role(group))
        self._cache[id(group)] = (group, info)
        self._seen[id(group)] = group
        return info

    def roles(self) -> dict[str, str]:
        """The final role of every group looked up so far that has one, by group name."""
        out: dict[str, str] = {}
        for group in self._seen.values():
            try:
                name, role = str(group.group_name), self._role(group)
            except Exception:  # destroyed since
                continue
            if role:
                out[name] = role
        return out

    def _role(self, group: Any) -> str:
        explicit = self._roles.get(id(group))
        if explicit is not None and explicit[0] is group:
            return explicit[1]
        desc = str(getattr(group, "group_desc", "") or "")
        role = role_from_text(desc) or self._mesh_role(group)
        suggested = self._suggested.get(id(group))
        if not role and suggested is not None and suggested[0] is group:
            role = suggested[1]
        return role

    def _mesh_role(self, group: Any) -> str:
        for ref in self._meshes:
            mesh = ref()
            if mesh is None:
                continue
            for dim, name in enumerate(mesh.mesh_dim_names or ()):
                try:
                    role = role_from_text(str(name)) if mesh.get_group(dim) is group else ""
                except Exception:  # groups not initialized yet
                    continue
                if role:  # ("world",) names no role: another mesh's dimension may
                    return role
        return ""

    def forget_default(self) -> None:
        """A new default group exists (init_process_group): drop the cached one."""
        self._cache.pop(0, None)
        self._changed()


def role_from_text(text: str) -> str:
    """The role named by a group description, or ''."""
    for token in re.split(r"[^a-z]+", text.lower()):
        if token in _ROLE_TOKENS:
            return _ROLE_TOKENS[token]
    return ""


def global_rank(group: Any, group_rank: int) -> int:
    if group is None or group is dist.group.WORLD:
        return int(group_rank)
    return int(dist.get_global_rank(group, group_rank))
