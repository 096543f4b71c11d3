"""DDP's gradient buckets, simulated without building the model.

PyTorch (torch 2.13, ``DistributedDataParallel`` with default arguments):

- Step 0: with ``find_unused_parameters=False`` and no static graph the
  initial bucket limit is ``sys.maxsize``, so every gradient of one dtype
  goes in one bucket and is all-reduced once, after the whole backward.
- After step 0 the reducer rebuilds its buckets in the order gradients became
  ready during that first backward, with limits ``[first, cap]``: parameters
  are added in order, and a bucket closes as soon as it holds at least its
  limit; the first bucket takes the first limit, every later one the last.
  ``first`` is ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB) only when
  ``bucket_cap_mb`` is left at its default; passing ``bucket_cap_mb``
  (as the workloads do, 25) makes the first bucket as large as the others.
- The ready order of a plain transformer is its reverse registration order
  (the last layer's gradients come first); a tied word embedding becomes
  ready last, where reverse registration order also puts it.

:func:`assign_buckets` reimplements ``dist._compute_bucket_assignment_by_size``
(a test holds the two equal).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
DEFAULT_BUCKET_CAP_BYTES = 25 * 1024 * 1024


def assign_buckets(
    sizes_bytes: Sequence[int],
    limits: Sequence[int],
    keys: Sequence[str] | None = None,
    keep_order: bool = False,
) -> list[list[int]]:
    """Indices of the tensors in each bucket, as PyTorch's reducer assigns them.

    ``sizes_bytes`` are tensor sizes in the order given, ``keys`` their
    dtype/device (tensors with different keys never share a bucket; each key
    walks its own ``limits``). Without ``keep_order`` the buckets are sorted
    by their smallest index, as PyTorch does when no explicit order is passed.
    """
    if not limits:
        raise ValueError("at least one bucket size limit is needed")
    keys = keys if keys is not None else ["" for _ in sizes_bytes]
    open_buckets: dict[str, tuple[list[int], int]] = {}
    limit_index: dict[str, int] = {}
    done: list[list[int]] = []
    for index, (size, key) in enumerate(zip(sizes_bytes, keys, strict=True)):
        members, total = open_buckets.get(key, ([], 0))
        members.append(index)
        total += size
        li = limit_index.setdefault(key, 0)
        if total >= limits[li]:
            done.append(members)
            open_buckets.pop(key, None)
            limit_index[key] = min(li + 1, len(limits) - 1)
        else:
            open_buckets[key] = (members, total)
    done.extend(members for members, _ in open_buckets.values())
    if not keep_order:
        done.sort(key=min)
    return done


def ddp_bucket_bytes(
    grad_bytes: Sequence[int],
    rebuilt: bool = True,
    first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
) -> list[int]:
    """Bytes of each all-reduce DDP issues per backward, in issue order.

    ``grad_bytes`` lists the gradients in registration order. ``rebuilt``
    False gives step 0 (one bucket); True the buckets rebuilt from the ready
    order after step 0.
    """
    if not grad_bytes:
        return []
    if not rebuilt:
        return [sum(grad_bytes)] if bucket_cap_bytes else []
    ready = list(reversed(grad_bytes))
    limits = [first_bucket_bytes, bucket_cap_bytes]
    if first_bucket_bytes >= bucket_cap_bytes:
        limits = [bucket_cap_bytes]
    buckets = assign_buckets(ready, limits, keep_order=True)
    return [sum(ready[i] for i in bucket) for bucket in buckets]


def initial_limits(find_unused_parameters: bool = False) -> list[int]:
    """Bucket limits DDP uses before its first rebuild."""
    if find_unused_parameters:
        return [DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_BYTES]
    return [sys.maxsize]
