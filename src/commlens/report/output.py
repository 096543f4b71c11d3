"""Write a rendered report to stdout or, atomically, to a file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from commlens.errors import UsageError
from commlens.report.document import Document
from commlens.report.formats import format_for, get_renderer


def emit(doc: Document, output: str | None, fmt: str | None, *, width: int | None = None) -> str:
    """Render ``doc`` in ``fmt`` (or the format ``output``'s suffix names) and write it.

    Returns the format used. A file is written whole or not at all (Markdown's
    plots go into ``<stem>_files/`` beside it first).
    """
    name = format_for(output, fmt)
    renderer = get_renderer(name, width=width)
    if output and output != "-" and hasattr(renderer, "asset_dir"):  # Markdown's plots
        target = Path(output)
        if not target.parent.is_dir():
            raise UsageError(f"{output}: directory {target.parent} does not exist")
        renderer.asset_dir = target.with_name(target.stem + "_files")
    content = renderer.render(doc)
    if not output or output == "-":
        if isinstance(content, bytes):
            sys.stdout.buffer.write(content)
        else:
            sys.stdout.write(content)
        sys.stdout.flush()
        return name
    path = Path(output)
    if not path.parent.is_dir():
        raise UsageError(f"{output}: directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        data = content if isinstance(content, bytes) else content.encode()
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{output}: cannot write ({exc.strerror})") from None
    return name
