"""DDP's gradient buckets, which never pass through the Python API.

Every DDP module gets, before its first forward, a comm hook that dispatches
to the user's own hook when one is registered (``register_comm_hook`` is
redirected to it, so the user's hook keeps running and its real traffic is
captured) or to PyTorch's default ``allreduce_hook`` otherwise. The hook marks
its calls as api ``ddp_hook`` with role dp; the all-reduces themselves are
recorded by the Python-API interception.
"""

from __future__ import annotations

import weakref
from typing import Any

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from commlens.capture import api
from commlens.capture.context import thread_state
from commlens.capture.patching import patch

_ATTR = "_commlens_user_hook"


_DDP_HINT = ("ddp_hook", "dp")  # (api, role) of the ops a DDP bucket issues


def _dispatcher(ddp: DDP) -> Any:
    ref = weakref.ref(ddp)

    # No annotations here: DDP checks them and wants the real types or none.
    def commlens_ddp_hook(state, bucket):  # type: ignore[no-untyped-def]
        module = ref()
        user = getattr(module, _ATTR, None) if module is not None else None
        thread = thread_state()
        saved = thread.hint
        thread.hint = _DDP_HINT
        try:
            if user is not None:
                return user[1](user[0], bucket)
            return default_hooks.allreduce_hook(state, bucket)
        finally:
            thread.hint = saved

    return commlens_ddp_hook


def _ensure_dispatcher(module: DDP, orig_register: Any) -> bool:
    if module.__dict__.get("_commlens_dispatch"):
        return True
    if getattr(module, "_comm_hooks", None):
        return False  # a hook was registered before the capture began
    orig_register(module, module.process_group, _dispatcher(module))
    module.__dict__["_commlens_dispatch"] = True
    return True


def install() -> None:
    orig_forward = DDP.forward
    orig_register = DDP.register_comm_hook
    orig_builtin = DDP._register_builtin_comm_hook

    def forward(self: DDP, *args: Any, **kwargs: Any) -> Any:
        if not self.__dict__.get("_commlens_dispatch") and api.RECORDER is not None:
            try:
                _ensure_dispatcher(self, orig_register)
            except Exception as exc:  # never break training: lose only the buckets
                api.RECORDER.fail(exc)
                self.__dict__["_commlens_dispatch"] = True
        return orig_forward(self, *args, **kwargs)

    def register_comm_hook(self: DDP, state: object, hook: Any) -> None:
        if not _ensure_dispatcher(self, orig_register):
            return orig_register(self, state, hook)
        if getattr(self, _ATTR, None) is not None:
            raise RuntimeError(
                "register_comm_hook or register_builtin_comm_hook can only be called once."
            )
        self._check_comm_hook(hook)
        setattr(self, _ATTR, (state, hook))
        return None

    def register_builtin_comm_hook(self: DDP, comm_hook_type: Any) -> None:
        hooks = {
            "ALLREDUCE": default_hooks.allreduce_hook,
            "FP16_COMPRESS": default_hooks.fp16_compress_hook,
        }
        hook = hooks.get(getattr(comm_hook_type, "name", str(comm_hook_type)))
        if hook is None or not _ensure_dispatcher(self, orig_register):
            return orig_builtin(self, comm_hook_type)
        return register_comm_hook(self, self.process_group, hook)

    patch(DDP, "forward", forward)
    patch(DDP, "register_comm_hook", register_comm_hook)
    patch(DDP, "_register_builtin_comm_hook", register_builtin_comm_hook)
