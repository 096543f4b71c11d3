"""Write a rendered report to stdout or to a file, safely (see :mod:`commlens.safefile`)."""

from __future__ import annotations

import sys

from commlens.errors import UsageError
from commlens.report.document import Document
from commlens.report.formats import format_for, get_renderer
from commlens.safefile import resolve_target, write_output


def output_format(output: str | None, fmt: str | None) -> str:
    """The format to write ``output`` in: ``fmt``, else from its suffix; a device or
    FIFO without a known suffix (``-o /dev/null``) gets text, like stdout."""
    try:
        return format_for(output, fmt)
    except UsageError:
        if not output or output == "-" or not resolve_target(output)[1]:
            raise
        return format_for(None, fmt)


def emit(doc: Document, output: str | None, fmt: str | None, *, width: int | None = None) -> str:
    """Render ``doc`` in ``fmt`` (or the format ``output``'s suffix names) and write it.

    Returns the format used. A regular file is written whole or not at all
    (Markdown's plots go into ``<stem>_files/`` beside it first); a device or
    a FIFO (``-o /dev/null``) is written into, never replaced; a symlink is
    written through. Every failure is one line, checked before rendering
    where it can be.
    """
    to_file = bool(output) and output != "-"
    real, in_place = resolve_target(output) if output and to_file else (None, False)
    name = output_format(output, fmt)
    renderer = get_renderer(name, width=width)
    if real is not None:
        if hasattr(renderer, "asset_dir") and not in_place:  # Markdown's plots beside it
            renderer.asset_dir = real.with_name(real.stem + "_files")
    content = renderer.render(doc)
    if output and to_file:
        write_output(output, content)
        return name
    if isinstance(content, bytes):
        sys.stdout.buffer.write(content)
    else:
        sys.stdout.write(content)
    sys.stdout.flush()
    return name
