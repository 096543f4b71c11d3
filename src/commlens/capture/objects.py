"""What each object collective (pickled Python objects) moves.

Sizes are the pickled sizes, known for the receiving side only after the
call returns, so these extractors fill them in an ``after`` step.
"""

from __future__ import annotations

import pickle
from typing import Any

from commlens.capture.ops import Call, _arg, _root


def _pickled(objs: Any) -> int:
    return sum(len(pickle.dumps(o)) for o in objs) if objs else 0


def _object_call(op: str, group: Any, peer: int | None) -> Call:
    return Call(op, group, 0, "object", 0, 0, 0, peer, False)


def all_gather_object(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    call = _object_call("all_gather_object", _arg(a, k, 2, "group"), None)
    call.bytes_in = len(pickle.dumps(_arg(a, k, 1, "obj")))

    def after(c: Call, _r: Any, a: tuple[Any, ...], k: dict[str, Any]) -> None:
        c.bytes_out = c.size_bytes = _pickled(_arg(a, k, 0, "object_list"))

    call.after = after
    return call


def gather_object(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    group = _arg(a, k, 3, "group")
    call = _object_call(
        "gather_object", group, _root(group, _arg(a, k, 2, "dst"), k.get("group_dst"))
    )
    call.bytes_in = len(pickle.dumps(_arg(a, k, 0, "obj")))
    call.size_bytes = call.bytes_in
    return call


def scatter_object_list(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
    group = _arg(a, k, 3, "group")
    call = _object_call(
        "scatter_object", group, _root(group, _arg(a, k, 2, "src"), k.get("group_src"))
    )
    call.bytes_in = _pickled(_arg(a, k, 1, "scatter_object_input_list"))

    def after(c: Call, _r: Any, a: tuple[Any, ...], k: dict[str, Any]) -> None:
        c.bytes_out = _pickled(_arg(a, k, 0, "scatter_object_output_list"))
        c.size_bytes = max(c.bytes_in, c.bytes_out)

    call.after = after
    return call


def object_list_call(op: str, root_name: str, group_root_name: str):
    def extract(a: tuple[Any, ...], k: dict[str, Any]) -> Call:
        group = _arg(a, k, 2, "group")
        call = _object_call(
            op, group, _root(group, _arg(a, k, 1, root_name), k.get(group_root_name))
        )

        def after(c: Call, _r: Any, a: tuple[Any, ...], k: dict[str, Any]) -> None:
            n = _pickled(_arg(a, k, 0, "object_list"))
            c.size_bytes = n
            if op == "recv_object":
                c.bytes_out = n
            else:
                c.bytes_in = n
                c.bytes_out = n if op == "broadcast_object" else 0

        call.after = after
        return call

    return extract
