"""What each object collective (pickled Python objects) moves.

Sizes are the pickled sizes, known for the receiving side only after the
call returns, so most of these have an ``after`` step (see
:data:`commlens.capture.intercept.After`) that fills them in.
"""

from __future__ import annotations

import pickle
from typing import Any

from commlens.capture.intercept import After, Extractor, Intercepted
from commlens.capture.ops import _arg, _root


def _pickled(objs: Any) -> int:
    return sum(len(pickle.dumps(o)) for o in objs) if objs else 0


def _object_call(
    op: str, group: Any, peer: int | None, b_in: int = 0, size: int = 0
) -> Intercepted:
    return (op, group, 0, "object", b_in, 0, size, peer, False, None)


def _sized(call: Intercepted, b_in: int, b_out: int, size: int) -> Intercepted:
    op, group, count, dtype, _, _, _, peer, is_async, tensor = call
    return (op, group, count, dtype, b_in, b_out, size, peer, is_async, tensor)


def all_gather_object(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    b_in = len(pickle.dumps(_arg(a, k, 1, "obj")))
    return _object_call("all_gather_object", _arg(a, k, 2, "group"), None, b_in)


def all_gather_object_after(
    c: Intercepted, _r: Any, a: tuple[Any, ...], k: dict[str, Any]
) -> Intercepted:
    n = _pickled(_arg(a, k, 0, "object_list"))
    return _sized(c, c[4], n, n)


def gather_object(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    group = _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 2, "dst"), k.get("group_dst"))
    b_in = len(pickle.dumps(_arg(a, k, 0, "obj")))
    return _object_call("gather_object", group, root, b_in, b_in)


def scatter_object_list(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
    group = _arg(a, k, 3, "group")
    root = _root(group, _arg(a, k, 2, "src"), k.get("group_src"))
    b_in = _pickled(_arg(a, k, 1, "scatter_object_input_list"))
    return _object_call("scatter_object", group, root, b_in)


def scatter_object_after(
    c: Intercepted, _r: Any, a: tuple[Any, ...], k: dict[str, Any]
) -> Intercepted:
    b_out = _pickled(_arg(a, k, 0, "scatter_object_output_list"))
    return _sized(c, c[4], b_out, max(c[4], b_out))


def object_list_call(op: str, root_name: str, group_root_name: str) -> tuple[Extractor, After]:
    """Extractor and after step of ``broadcast/send/recv_object_list``."""

    def extract(a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
        group = _arg(a, k, 2, "group")
        return _object_call(
            op, group, _root(group, _arg(a, k, 1, root_name), k.get(group_root_name))
        )

    def after(c: Intercepted, _r: Any, a: tuple[Any, ...], k: dict[str, Any]) -> Intercepted:
        n = _pickled(_arg(a, k, 0, "object_list"))
        if op == "recv_object":
            return _sized(c, 0, n, n)
        return _sized(c, n, n if op == "broadcast_object" else 0, n)

    return extract, after
