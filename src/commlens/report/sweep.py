"""The report of a sweep directory: tables and plots across the grid.

``commlens report SWEEP_DIR`` delegates here (:func:`render_sweep`); the
document is the same :class:`~commlens.report.document.Document` a run's
report is, so text, Markdown, HTML, JSON and CSV come from the same
renderers. Sections appear when the grid answers them (several links,
several sequence lengths, ZeRO beside DP, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commlens.report.document import Document
from commlens.report.sweep_sections import link_headline, sweep_sections
from commlens.sweep.catalog import SPEC_FILE, open_catalog
from commlens.units import plural


def _title(spec_file: Path) -> str:
    """The sweep file's title ('' when there is none or the file no longer parses)."""
    from commlens.safefile import read_toml

    try:
        title = read_toml(spec_file, follow=False).get("sweep", {}).get("title", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return title if isinstance(title, str) else ""


def build_sweep_document(path: str | Path) -> Document:
    """The sweep's report as a Document."""
    sweep = Path(path)
    con = open_catalog(sweep)
    try:
        counts = dict(con.execute("SELECT status, count(*) FROM points GROUP BY status").fetchall())
        sections = sweep_sections(con, sweep)
        headline, lead = link_headline(con, sweep)
        data: dict[str, Any] = {"sweep": str(sweep), "status": counts}
        for s in sections:
            data[s.key] = s.table.to_pylist()
        points = con.sql("SELECT * FROM points ORDER BY rowid").to_arrow_table()
    finally:
        con.close()
    title_line = _title(sweep / SPEC_FILE)
    facts = [("sweep", str(sweep))]
    if title_line:
        facts.append(("about", title_line))
    facts.append(("points", ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))))
    warnings = []
    if counts.get("pending"):
        warnings.append(
            f"{plural(counts['pending'], 'point')} not run yet: run `commlens sweep` again"
        )
    return Document(
        title=f"commlens sweep report: {title_line or sweep.name}",
        headline=headline,
        lead=lead,
        facts=facts,
        sections=sections,
        warnings=warnings,
        data=data,
        csv_table=points,
    )


def render_sweep(
    path: str | Path, fmt: str | None, output: str | None, width: int | None = None
) -> str:
    """Render the sweep at ``path`` like ``commlens report``; returns the format used."""
    from commlens.report.output import emit

    return emit(build_sweep_document(path), output, fmt, width=width)


def save_figures(path: str | Path, out_dir: str | Path, prefix: str = "") -> list[Path]:
    """Write every plot of the sweep's report as PNG into ``out_dir``."""
    from commlens.report.plots import png
    from commlens.safefile import make_dir, write_output

    target = make_dir(out_dir)
    written = []
    doc = build_sweep_document(path)
    if doc.lead is not None:
        file = target / f"{prefix}link_speedup.png"
        written.append(write_output(file, png(doc.lead[1]()), within=target))
    for section in doc.sections:
        for _, make in section.plots:
            file = target / f"{prefix}{section.key}.png"
            written.append(write_output(file, png(make()), within=target))
    return written
