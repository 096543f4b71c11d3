"""Loaded by every Python process that ``commlens trace`` starts.

When ``COMMLENS_TRACE_DIR`` is set, a capture starts right after ``torch`` has
finished importing, so processes that never import torch pay nothing. Any
other ``sitecustomize`` further down ``sys.path`` still runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _start() -> None:
    try:
        from commlens.capture import start_from_env

        start_from_env()
    except Exception as exc:  # never break the traced program
        print(f"commlens: warning: tracing disabled in pid {os.getpid()}: {exc}", file=sys.stderr)


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _start()

        loader.exec_module = exec_module
        return spec


def _chain() -> None:
    """Run the next sitecustomize on sys.path, as Python would have without us."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != __file__:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("COMMLENS_TRACE_DIR"):
    if "torch" in sys.modules:
        _start()
    else:
        sys.meta_path.insert(0, _AfterTorch())
_chain()
