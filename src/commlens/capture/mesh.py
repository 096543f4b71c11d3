"""Roles from DeviceMesh dimension names (``mesh_dim_names=("dp", "tp")``).

A one-dimensional mesh over all ranks reuses the default group, whose own
description says nothing; the mesh's dimension name does. Submeshes
(``mesh["dp_shard"]``, ``_flatten``, ``_unflatten``) are meshes too.
Installing this also names the roles of the groups frameworks use
(:mod:`commlens.capture.framework_roles`).
"""

from __future__ import annotations

from typing import Any

from commlens.capture import framework_roles
from commlens.capture.intercept import ACTIVE
from commlens.capture.patching import patch


def install() -> None:
    framework_roles.install()
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:
        return
    orig_init = DeviceMesh.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        rec = ACTIVE.recorder
        if rec is not None and not rec.disabled and self.mesh_dim_names:
            # Groups of a mesh made from existing groups exist only after
            # __init__: resolve them when an op first names one.
            rec.groups.add_mesh(self)

    patch(DeviceMesh, "__init__", __init__)
