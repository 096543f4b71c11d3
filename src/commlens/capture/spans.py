"""Which module's forward made an autograd node: the module named in backward.

Autograd numbers the nodes a thread makes in the order it makes them (the
sequence number). Each module call on the model's thread records the
numbers its forward used, hooks included: ``[start, end)``, children before
their parents (in order of return). In backward, the node autograd is running
when an op is issued names the innermost module whose span holds its number;
a gradient accumulator (DDP's and FSDP1's bucket hooks run on one) names the
module that holds its parameter. Nothing is attached to the graph, so a
module call costs two reads of a counter and two appends.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, bisect_right
from threading import get_ident
from typing import Any

import torch
from torch.nn.modules.module import Module

_next_seq = torch._C._autograd._get_sequence_nr
_current_node = torch._C._current_autograd_node


class ForwardSpans:
    """The sequence-number spans of the module calls of the last two steps, on one thread."""

    __slots__ = ("_kept_from", "ends", "spans", "thread")

    def __init__(self) -> None:
        self.ends: list[int] = []  # each span's end, non-decreasing (spans in order of return)
        self.spans: list[tuple[int, Module]] = []  # (start, module), parallel to ends
        self.thread: int | None = None  # the thread that runs the model (its first root call)
        self._kept_from = 0  # spans ending before this number are let go at the next step

    def claim(self) -> None:
        """The calling thread runs the model from now on (called at a root module call)."""
        ident = get_ident()
        if self.thread != ident:
            self.thread = ident
            self.ends.clear()
            self.spans.clear()

    def next_step(self) -> None:
        """A step boundary: let go of the spans of the step before the one that just ended."""
        cut = bisect_left(self.ends, self._kept_from)
        if cut:
            del self.ends[:cut]
            del self.spans[:cut]
        self._kept_from = _next_seq() if self.thread == get_ident() else 0

    def module_of(self, node: Any) -> Module | None:
        """The innermost module whose forward made ``node`` (None where none did)."""
        seq = node._sequence_nr()
        ends, spans = self.ends, self.spans
        i = bisect_right(ends, seq)  # the first span ending past seq...
        while i < len(ends):  # ... that also starts at or before it
            start, module = spans[i]
            if start <= seq:
                return module
            i += 1
        return None


class ParameterOwners:
    """The path of the module holding a parameter directly, under the first root holding it.

    A parameter two modules share (a tied embedding) is its first holder's, as
    ``named_parameters`` names it.
    """

    def __init__(self) -> None:
        self._by_root: weakref.WeakKeyDictionary[Module, dict[int, str]] = (
            weakref.WeakKeyDictionary()
        )
        self._missing: dict[int, weakref.ref[torch.Tensor]] = {}  # held by no root module

    def path(self, roots: Any, param: torch.Tensor) -> str | None:
        miss = self._missing.get(id(param))
        if miss is not None and miss() is param:
            return None
        for root in list(roots):
            owners = self._by_root.get(root)
            if owners is None or id(param) not in owners:
                owners = {}
                for name, m in root.named_modules(remove_duplicate=False):
                    for p in m._parameters.values():
                        if p is not None:  # a tied weight: its first holder, as torch names it
                            owners.setdefault(id(p), name)
                self._by_root[root] = owners
            if id(param) in owners:
                return owners[id(param)]
        if len(self._missing) > 10_000:
            self._missing.clear()
        self._missing[id(param)] = weakref.ref(param)
        return None


def current_node() -> Any:
    """The autograd node this thread is running (None outside backward)."""
    return _current_node()
