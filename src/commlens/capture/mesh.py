"""Roles from DeviceMesh dimension names (``mesh_dim_names=("dp", "tp")``).

A one-dimensional mesh over all ranks reuses the default group, whose own
description says nothing; the mesh's dimension name does.
"""

from __future__ import annotations

from typing import Any

from commlens.capture import api
from commlens.capture.groups import role_from_text
from commlens.capture.patching import patch


def install() -> None:
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:
        return
    orig_init = DeviceMesh.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        rec = api.RECORDER
        if rec is None or rec.disabled:
            return
        try:
            for dim, name in enumerate(self.mesh_dim_names or ()):
                role = role_from_text(str(name))
                if role:
                    rec.groups.set_role(self.get_group(dim), role)
        except Exception as exc:
            rec.fail(exc)

    patch(DeviceMesh, "__init__", __init__)
