"""The renderer base: what every output format implements."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports the formats at start-up: keep this light
    from commlens.report.document import Document


class Renderer:
    """Turns a :class:`Document` into text or bytes."""

    name = ""
    extension = ""
    binary = False

    def render(self, doc: Document) -> str | bytes:
        raise NotImplementedError
