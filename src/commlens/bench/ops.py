"""The benchmarked operations, with nccl-tests sizes.

``S`` (``size_bytes``) follows conventions §3: the buffer for all-reduce,
broadcast and send/recv; the gathered (total) buffer for all-gather and
reduce-scatter; the whole send buffer for all-to-all. Element counts are
rounded down so that every rank gets an equal share.

Each :class:`Case` holds the buffers of one op and size on one rank:
``run()`` issues the op once (timed by the caller), ``check()`` refills the
inputs with rank-specific values, runs the op once more and says whether the
result is exactly (integers) or closely (floating point) what it must be.
Their bus-bandwidth factors are those of :data:`commlens.optable.OP_TRAFFIC`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

# Ops whose S is split into n equal shares (the count must be a multiple of n).
_SPLIT = {"all_gather", "reduce_scatter", "all_to_all"}

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}
DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp64": "float64",
    "double": "float64",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}


# torch ≥ 2.10 names; the older aliases warn (conventions §6).
all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def element_count(op: str, size_bytes: int, elem_size: int, n: int) -> int:
    """Elements of S for ``op`` (0 when ``size_bytes`` is too small to run it)."""
    count = size_bytes // elem_size
    if op in _SPLIT:
        count -= count % n
    return count


@dataclass
class Case:
    """Buffers and calls for one op and size on this rank."""

    run: Callable[[], None]
    check: Callable[[], bool]


def _pattern(count: int, dtype: torch.dtype, device: torch.device, scale: int) -> torch.Tensor:
    # Small integers (1..4) × scale: exact in every dtype for the group sizes we run.
    return ((torch.arange(count, device=device) % 4 + 1) * scale).to(dtype)


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.dtype.is_floating_point:
        return bool(torch.allclose(got.double(), want.double(), rtol=1e-2, atol=0.0))
    return bool(torch.equal(got, want))


def make_case(op: str, count: int, dtype: torch.dtype, device: torch.device) -> Case:
    """Allocate the buffers of ``op`` on ``count`` elements (S) for this rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    share = count // n
    full = n * (n + 1) // 2  # sum over ranks of (rank + 1)

    def zeros(k: int) -> torch.Tensor:
        return torch.zeros(k, dtype=dtype, device=device)

    def ones(k: int) -> torch.Tensor:
        return torch.ones(k, dtype=dtype, device=device)

    if op == "all_reduce":
        buf = ones(count)

        def check_ar() -> bool:
            buf.copy_(_pattern(count, dtype, device, rank + 1))
            dist.all_reduce(buf)
            return _same(buf, _pattern(count, dtype, device, full))

        return Case(lambda: dist.all_reduce(buf), check_ar)

    if op == "all_gather":
        inp, out = ones(share), zeros(count)

        def check_ag() -> bool:
            inp.copy_(_pattern(share, dtype, device, rank + 1))
            all_gather_flat(out, inp)
            want = torch.cat([_pattern(share, dtype, device, r + 1) for r in range(n)])
            return _same(out, want)

        return Case(lambda: all_gather_flat(out, inp), check_ag)

    if op == "reduce_scatter":
        inp, out = ones(count), zeros(share)

        def check_rs() -> bool:
            inp.copy_(_pattern(count, dtype, device, rank + 1))
            reduce_scatter_flat(out, inp)
            want = _pattern(count, dtype, device, full)[rank * share : (rank + 1) * share]
            return _same(out, want)

        return Case(lambda: reduce_scatter_flat(out, inp), check_rs)

    if op == "broadcast":
        buf = ones(count)

        def check_bc() -> bool:
            buf.copy_(_pattern(count, dtype, device, 3) if rank == 0 else zeros(count))
            dist.broadcast(buf, src=0)
            return _same(buf, _pattern(count, dtype, device, 3))

        return Case(lambda: dist.broadcast(buf, src=0), check_bc)

    if op == "all_to_all":
        inp, out = ones(count), zeros(count)

        def check_a2a() -> bool:
            # Share j of rank r holds (r·n + j + 1): out share j must be (j·n + rank + 1).
            mine = [torch.full((share,), rank * n + j + 1) for j in range(n)]
            inp.copy_(torch.cat(mine).to(dtype))
            dist.all_to_all_single(out, inp)
            want = torch.cat([torch.full((share,), j * n + rank + 1) for j in range(n)])
            return _same(out, want.to(dtype=dtype, device=device))

        return Case(lambda: dist.all_to_all_single(out, inp), check_a2a)

    if op == "sendrecv":
        send, recv = ones(count), zeros(count)
        nxt, prv = (rank + 1) % n, (rank - 1) % n

        def exchange() -> None:
            # Every rank sends to the next and receives from the previous (a ring shift).
            ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        def check_sr() -> bool:
            send.copy_(_pattern(count, dtype, device, rank + 1))
            exchange()
            return _same(recv, _pattern(count, dtype, device, prv + 1))

        return Case(exchange, check_sr)

    raise ValueError(f"unknown op {op!r}")
