"""JSON renderer: ``Document.data`` (the report's machine-readable contract).

One top-level key per line, each value in compact JSON (the C encoder: a
report of a large run has hundreds of thousands of values). NaN and
infinities become null.
"""

from __future__ import annotations

import json
import math
from typing import Any

from commlens.report.base import Renderer
from commlens.report.document import Document


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, default=str)
    except ValueError:  # a NaN or infinity somewhere: only then walk the value
        return json.dumps(_clean(value), allow_nan=False, default=str)


class JsonRenderer(Renderer):
    name = "json"
    extension = ".json"

    def render(self, doc: Document) -> str:
        data = doc.data
        if not isinstance(data, dict) or not data:
            return _dumps(data) + "\n"
        lines = [f" {json.dumps(str(k))}: {_dumps(v)}" for k, v in data.items()]
        return "{\n" + ",\n".join(lines) + "\n}\n"
