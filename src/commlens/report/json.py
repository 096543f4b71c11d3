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


def dumps(value: Any) -> str:
    """``value`` as compact JSON, NaN and infinities as null, anything else not
    JSON-native as its ``str``."""
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
            return dumps(data) + "\n"
        lines = [f" {json.dumps(str(k))}: {dumps(v)}" for k, v in data.items()]
        return "{\n" + ",\n".join(lines) + "\n}\n"
