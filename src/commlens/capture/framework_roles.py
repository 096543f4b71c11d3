"""The role of the groups that frameworks use, named when they build them.

FSDP1 and FSDP2 (``fully_shard``'s mesh), ZeroRedundancyOptimizer and
DeepSpeed's engines (its data-parallel group, the ZeRO++ hpZ group, and the
default group when it runs without model parallelism) use their groups for
data parallelism; a pipeline stage (``PipelineStage``'s group) for pipeline
parallelism; DeepSpeed's pipeline grid names its own groups. DDP's is named
by :mod:`commlens.capture.ddp`. FSDP2's parameter groups and DeepSpeed's
engines are noted with their gradients once built (:mod:`commlens.capture.wrapped`).

Importing these frameworks costs seconds, so nothing is imported here: each
is patched as soon as its module is imported (now, if it is already), by a
finder on ``sys.meta_path`` that only watches for the names of :data:`HOOKS`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch.distributed as dist

from commlens.capture import wrapped
from commlens.capture.intercept import ACTIVE
from commlens.capture.patching import change, patch


def _suggest(groups: Sequence[Any], role: str) -> None:
    """Note ``role`` for each group (None: the default group), never breaking the caller."""
    rec = ACTIVE.recorder
    if rec is None or rec.disabled:
        return
    try:
        for group in groups:
            if group is None and not dist.is_initialized():
                continue
            rec.groups.suggest_role(group, role)
    except Exception as exc:
        rec.fail(exc)


def _before_init(
    cls: type,
    role: str,
    groups: Callable[[dict[str, Any]], Sequence[Any]],
    built: Callable[[Any], Sequence[Any]] | None = None,
) -> None:
    """Name the role of the groups a constructor call names, before it runs, and
    of those ``built(self)`` gives once it has run (groups the object made itself)."""
    orig = cls.__init__  # type: ignore[misc]
    signature = inspect.signature(orig)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if ACTIVE.recorder is not None:
            try:
                bound = signature.bind(self, *args, **kwargs).arguments
            except TypeError:
                bound = None  # the constructor itself says what is wrong
            if bound is not None:
                _suggest(groups(bound), role)
        orig(self, *args, **kwargs)
        if built is not None and ACTIVE.recorder is not None:
            _suggest(built(self), role)

    patch(cls, "__init__", __init__)


def _mesh_groups(mesh: Any) -> list[Any]:
    return [mesh.get_group(dim) for dim in range(mesh.ndim)]


def _fsdp1_groups(a: dict[str, Any]) -> Sequence[Any]:
    if a.get("device_mesh") is not None:
        return _mesh_groups(a["device_mesh"])
    group = a.get("process_group")
    if isinstance(group, tuple):
        return list(group)
    if group is None and "HYBRID" in str(a.get("sharding_strategy")):
        return []  # it builds its own intra- and inter-node groups: named once built
    return [group]


def _fsdp1_built(fsdp: Any) -> Sequence[Any]:
    """The groups an FSDP1 module shards and replicates over (HYBRID_SHARD's own too)."""
    names = ("process_group", "_inter_node_pg")
    return [g for g in (getattr(fsdp, name, None) for name in names) if g is not None]


def _fsdp1(module: ModuleType) -> None:
    _before_init(module.FullyShardedDataParallel, "dp", _fsdp1_groups, _fsdp1_built)


def _fsdp2(module: ModuleType) -> None:
    def groups(a: dict[str, Any]) -> Sequence[Any]:
        infos = (a.get("mesh_info"), a.get("post_forward_mesh_info"))
        return [
            getattr(info, name)
            for info in infos
            if info is not None
            for name in ("shard_process_group", "replicate_process_group")
            if getattr(info, name, None) is not None
        ]

    def built(group: Any) -> Sequence[Any]:
        wrapped.fsdp2_group_built(group)
        return []

    _before_init(module.FSDPParamGroup, "dp", groups, built)


def _zero(module: ModuleType) -> None:
    _before_init(module.ZeroRedundancyOptimizer, "dp", lambda a: [a.get("process_group")])


def _pipelining(module: ModuleType) -> None:
    _before_init(module._PipelineStageBase, "pp", lambda a: [a.get("group")])


def _parallel_styles(module: ModuleType) -> None:
    """A tensor-parallel style applied over a 1-D mesh: its group is tp (a mesh
    without dimension names says nothing of its own)."""
    base = module.ParallelStyle
    for cls in [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base)]:
        orig = cls.__dict__.get("_apply")
        if orig is None:
            continue

        def _apply(self: Any, mod: Any, device_mesh: Any, _orig: Any = orig) -> Any:
            if ACTIVE.recorder is not None and getattr(device_mesh, "ndim", 0) == 1:
                _suggest([device_mesh.get_group()], "tp")
            return _orig(self, mod, device_mesh)

        patch(cls, "_apply", _apply)


def _returns_group(module: ModuleType, name: str, role: str) -> None:
    """``module.name()`` returns a group: name its role on each call."""
    orig = getattr(module, name, None)
    if orig is None:
        return

    def getter(*args: Any, **kwargs: Any) -> Any:
        group = orig(*args, **kwargs)
        if group is not None and ACTIVE.recorder is not None:
            _suggest([group], role)
        return group

    patch(module, name, getter)


def _deepspeed_groups(module: ModuleType) -> None:
    for name in (
        "_clone_world_group",
        "_get_data_parallel_group",
        "_get_sequence_data_parallel_group",
        "_get_zero_param_intra_parallel_group",
    ):
        _returns_group(module, name, "dp")


def _deepspeed_engine(module: ModuleType) -> None:
    engine = module.DeepSpeedEngine
    orig = engine.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Without model parallelism every rank is a data-parallel peer.
        if ACTIVE.recorder is not None and kwargs.get("mpu") is None:
            _suggest([None], "dp")
        orig(self, *args, **kwargs)
        if ACTIVE.recorder is not None:
            wrapped.deepspeed_built(self)

    patch(engine, "__init__", __init__)


def _deepspeed_grid(module: ModuleType) -> None:
    """DeepSpeed's pipeline grid: its pipe, data and slice (tensor) groups; its model
    group (one replica's stages and slices) by the one axis it spans; and the default
    group, on which the pipeline's sends and receives go."""
    grid = module.PipelineParallelGrid
    orig = grid.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        if ACTIVE.recorder is None:
            return
        pipe = getattr(self, "pipe_parallel_size", 1)
        slices = getattr(self, "model_parallel_size", 1)

        def held(name: str) -> list[Any]:  # never None: that would name the default group
            group = getattr(self, name, None)
            return [] if group is None else [group]

        _suggest(held("dp_proc_group"), "dp")
        if pipe > 1:
            _suggest(held("pp_proc_group"), "pp")
            _suggest([None], "pp")
        if slices > 1:
            _suggest(held("slice_proc_group"), "tp")
        model = "pp" if slices == 1 else "tp" if pipe == 1 else ""
        if model:
            _suggest(held("ds_model_proc_group"), model)

    patch(grid, "__init__", __init__)


# module -> what to patch in it once it is imported
HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "torch.distributed.fsdp.fully_sharded_data_parallel": _fsdp1,
    "torch.distributed.fsdp._fully_shard._fsdp_param_group": _fsdp2,
    "torch.distributed.optim.zero_redundancy_optimizer": _zero,
    "torch.distributed.pipelining.stage": _pipelining,
    "torch.distributed.tensor.parallel.style": _parallel_styles,
    "deepspeed.utils.groups": _deepspeed_groups,
    "deepspeed.runtime.engine": _deepspeed_engine,
    "deepspeed.runtime.pipe.topology": _deepspeed_grid,
}


def _patched(name: str) -> None:
    try:
        HOOKS[name](sys.modules[name])
    except Exception as exc:  # a framework version without what is patched
        rec = ACTIVE.recorder or (ACTIVE.capture.recorder if ACTIVE.capture else None)
        if rec is not None:
            rec.fail(exc)


class _Loader(importlib.abc.Loader):
    """Runs a watched module's own loader, then patches the module."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _patched(module.__name__)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of a module of :data:`HOOKS`."""

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def install() -> None:
    """Patch the watched modules imported already; watch for the others."""
    finder = _Finder()

    def do() -> None:
        sys.meta_path.insert(0, finder)

    def undo() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    change(do, undo)
    for name in HOOKS:
        if name in sys.modules:
            _patched(name)
