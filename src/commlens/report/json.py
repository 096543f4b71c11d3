"""JSON renderer: ``Document.data`` (the report's machine-readable contract)."""

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


class JsonRenderer(Renderer):
    name = "json"
    extension = ".json"

    def render(self, doc: Document) -> str:
        return json.dumps(_clean(doc.data), indent=1, default=str) + "\n"
