"""DDP: its group is a data-parallel group.

DDP's gradient buckets are all-reduced by its C++ reducer; they are recorded
at the c10d dispatcher (:mod:`commlens.capture.c10d`, registered at the first
DDP forward), and DDP itself is left as it is: its fused bucket path, a
user's comm hook (whose own calls the Python-API interception sees), its
numbers. DDP also gives a role: its process group is noted as dp, unless the
caller or the group's description already named it.
"""

from __future__ import annotations

from typing import Any

from torch.nn.parallel import DistributedDataParallel as DDP

from commlens.capture import c10d
from commlens.capture.intercept import ACTIVE
from commlens.capture.patching import patch


def install() -> None:
    orig_forward = DDP.forward

    def forward(self: DDP, *args: Any, **kwargs: Any) -> Any:
        rec = ACTIVE.recorder
        if rec is not None and not self.__dict__.get("_commlens_seen"):
            self.__dict__["_commlens_seen"] = True
            try:
                c10d.install(rec)
                rec.groups.suggest_role(self.process_group, "dp")
            except Exception as exc:  # never break training
                rec.fail(exc)
        return orig_forward(self, *args, **kwargs)

    patch(DDP, "forward", forward)
