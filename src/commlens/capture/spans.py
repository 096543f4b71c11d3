"""Which module's forward made an autograd node: the module named in backward.

Autograd numbers the nodes a thread makes in the order it makes them (the
sequence number). Each module call on the model's thread records the
numbers its forward used, hooks included: ``[start, end)``, children before
their parents (in order of return). In backward, the node autograd is running
when an op is issued names the innermost module whose span holds its number;
a gradient accumulator (DDP's and FSDP1's bucket hooks run on one) names the
module that holds its parameter (:meth:`ModuleNames.holder` in
:mod:`commlens.capture.context`). Nothing is attached to the graph, so a
module call costs two reads of a counter and two appends.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from threading import get_ident
from typing import Any

import torch
from torch.nn.modules.module import Module

_next_seq = torch._C._autograd._get_sequence_nr
current_node = torch._C._current_autograd_node
"""The autograd node this thread is running (None outside backward)."""


class ForwardSpans:
    """The sequence-number spans of the module calls of the last two steps, on one thread."""

    __slots__ = ("_kept_from", "ends", "starts", "thread")

    def __init__(self) -> None:
        self.ends: list[int] = []  # each span's end, non-decreasing (spans in order of return)
        self.starts: list[tuple[int, Module]] = []  # (start, module), parallel to ends
        self.thread: int | None = None  # the thread that runs the model (its first root call)
        self._kept_from = 0  # spans ending before this number are let go at the next step

    def claim(self) -> None:
        """The calling thread runs the model from now on (called at a root module call)."""
        ident = get_ident()
        if self.thread != ident:
            self.thread = ident
            self.ends.clear()
            self.starts.clear()

    def next_step(self) -> None:
        """A step boundary: let go of the spans of the step before the one that just ended."""
        cut = bisect_left(self.ends, self._kept_from)
        if cut:
            del self.ends[:cut]
            del self.starts[:cut]
        self._kept_from = _next_seq() if self.thread == get_ident() else 0

    def module_of(self, node: Any) -> Module | None:
        """The innermost module whose forward made ``node`` (None where none did)."""
        seq = node._sequence_nr()
        ends, starts = self.ends, self.starts
        i = bisect_right(ends, seq)  # the first span ending past seq...
        while i < len(ends):  # ... that also starts at or before it
            start, module = starts[i]
            if start <= seq:
                return module
            i += 1
        return None
