"""What one PyTorch profiler event says about a communication op.

:func:`op_from_rpc` reads a ``record_param_comms`` with comm args (op, element
counts, dtype, group name, ranks cut short past 30 and rebuilt, role from the
group's description, peer); :func:`op_from_c10d` a ``c10d::*`` op from its
``Input Dims`` and ``Input type`` (older traces, and gloo's); and
:func:`op_from_kernel` an NCCL kernel that no CPU op launched (its comm args,
else its name). A group the event does not name is the world
(:func:`world_group`), counted in the provenance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commlens.importers.commops import canonical_op, kernel_op, sizes
from commlens.importers.groups import parse_ranks, rebuild_ranks, role_of
from commlens.importers.kinetoscan import CpuOp, Kernel
from commlens.importers.model import Group, ImportedRun, Op, dtype_of


def group_of(
    args: dict[str, Any], run: ImportedRun, counts: dict[str, int]
) -> tuple[str, tuple[int, ...], str]:
    """(name, global ranks, role) of the op's group from record_param_comms args."""
    name = args.get("Process Group Name")
    if name is None:
        counts["group unknown: the world"] += 1
        return "0", tuple(range(run.world_size)), ""
    name = str(name)
    size_arg = args.get("Group size")
    size = size_arg if isinstance(size_arg, int) else 0
    ranks, cut = parse_ranks(args.get("Process Group Ranks"))
    if cut or (size and len(ranks) != size):
        known = run.groups.get(name)
        rebuilt = rebuild_ranks(args.get("Global rank start"), args.get("Global rank stride"), size)
        if known is not None and len(known.ranks) == size:
            ranks = known.ranks
            counts["group ranks rebuilt from pg_config"] += 1
        elif rebuilt is not None:
            ranks = rebuilt
            counts["group ranks rebuilt from start/stride"] += 1
    desc = str(args.get("Process Group Description", ""))
    group = run.groups.get(name)
    if group is None:
        group = run.groups[name] = Group(name, ranks, desc, role_of(desc))
    elif not group.ranks and ranks:
        group.ranks = ranks
    return name, ranks or group.ranks, group.role or role_of(desc)


def world_group(run: ImportedRun) -> tuple[str, tuple[int, ...], str]:
    world = tuple(range(run.world_size))
    for g in run.groups.values():
        if g.ranks == world and g.desc in ("default_pg", ""):
            return g.name, world, g.role
    run.groups.setdefault("0", Group("0", world, "default_pg"))
    return "0", world, ""


def op_from_rpc(o: CpuOp, run: ImportedRun, counts: dict[str, int]) -> Op | None:
    args = o.args
    name = args.get("Collective name")
    op = canonical_op(str(name)) if name is not None else None
    if op is None:
        return None
    dt = dtype_of(str(args.get("dtype", "")))
    dtype, elem = dt if dt else (str(args.get("dtype", "")).lower(), 0)
    pg_name, ranks, role = group_of(args, run, counts)
    n_in = args.get("In msg nelems")
    n_out = args.get("Out msg nelems")
    n_in = n_in if isinstance(n_in, int) else 0
    n_out = n_out if isinstance(n_out, int) else None
    s = sizes(op, n_in, n_out, elem, len(ranks))
    if not elem and op != "barrier":
        counts["dtype unknown: bytes 0"] += 1
    peer = _peer(op, args, ranks)
    return Op(
        op,
        0,
        0,
        pg_name=pg_name,
        pg_ranks=ranks,
        group_size=len(ranks),
        role=role,
        dtype=dtype,
        count=s.count,
        bytes_in=s.bytes_in,
        bytes_out=s.bytes_out,
        size_bytes=s.size_bytes,
        peer=peer,
        api="record_param_comms",
    )


def _peer(op: str, args: dict[str, Any], ranks: tuple[int, ...]) -> int | None:
    for key in ("Dst Rank", "Src Rank", "Root Rank", "Root rank"):
        value = args.get(key)
        if isinstance(value, int) and value >= 0:
            return value
    return None


# c10d op -> (index of the input tensor in Input Dims, index of the output or None,
# index of a group-local peer/root in Concrete Inputs or None)
_C10D_ARGS: dict[str, tuple[int, int | None, int | None]] = {
    "all_reduce": (0, None, None),
    "broadcast": (0, None, 2),
    "reduce": (0, None, 2),
    "send": (0, None, 2),
    "recv": (0, None, 2),
    "barrier": (0, None, None),
}
_C10D_OUT_FIRST = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}


def numel(dims: Any) -> int | None:
    """Elements of one Input Dims entry: a shape, or a list of shapes (TensorList)."""
    if not isinstance(dims, list) or not dims:
        return None if not isinstance(dims, list) else (None if dims == [] else 0)
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims)) if dims else 1
    total = 0
    for d in dims:
        n = numel(d)
        if n is None:
            return None
        total += n
    return total


def op_from_c10d(
    o: CpuOp, run: ImportedRun, counts: dict[str, int], world: tuple[str, tuple[int, ...], str]
) -> Op | None:
    op = canonical_op(o.name)
    if op is None:
        return None
    args = o.args
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    if op in _C10D_OUT_FIRST:  # (output, input, ...)
        at: tuple[int, int | None, int | None] = (1, 0, 3 if op in ("gather", "scatter") else None)
    else:
        at = _C10D_ARGS.get(op, (0, None, None))
    t_in, t_out, peer_at = at
    n_in = numel(dims[t_in]) if len(dims) > t_in else None
    n_out = numel(dims[t_out]) if t_out is not None and len(dims) > t_out else None
    dtype_text = str(types[t_in]) if len(types) > t_in else ""
    dt = dtype_of(dtype_text)
    pg_name, ranks, role = world
    counts["group not in the trace: the world assumed"] += 1
    peer = None
    concrete = args.get("Concrete Inputs") or []
    if peer_at is not None and len(concrete) > peer_at:
        try:
            local = int(concrete[peer_at])
            peer = ranks[local] if 0 <= local < len(ranks) else None
        except (TypeError, ValueError):
            peer = None
    result = Op(
        op,
        0,
        0,
        pg_name=pg_name,
        pg_ranks=ranks,
        group_size=len(ranks),
        role=role,
        dtype=dt[0] if dt else "",
        peer=peer,
        api=o.name,
    )
    if op != "barrier":
        result.count = n_in or 0
        result.bytes_out = n_out if n_out is not None else -1  # elements until the dtype is known
        if n_in is None:
            result.count = -1  # size from elsewhere (execution trace, gloo annotation)
    set_bytes(result, dt[1] if dt else 0)
    return result


def set_bytes(op: Op, elem: int) -> None:
    """Fill the byte columns of an op built from a c10d op once its element size is known."""
    if op.op == "barrier" or op.count < 0 or not elem:
        return
    n_out = op.bytes_out if op.bytes_out >= 0 else None
    s = sizes(op.op, op.count, n_out, elem, op.group_size)
    op.count, op.bytes_in, op.bytes_out, op.size_bytes = (
        s.count,
        s.bytes_in,
        s.bytes_out,
        s.size_bytes,
    )
    op.bytes_out = s.bytes_out


def op_from_kernel(kern: Kernel, run: ImportedRun, counts: dict[str, int]) -> Op | None:
    if "Collective name" in kern.args:
        return op_from_rpc(CpuOp(kern.name, -1, kern.ts, kern.dur, kern.args), run, counts)
    name = kernel_op(kern.name)
    if name is None:
        return None
    counts["op named by its kernel only (size unknown)"] += 1
    g, ranks, role = world_group(run)
    return Op(name, 0, 0, pg_name=g, pg_ranks=ranks, group_size=len(ranks), role=role, api="kernel")
