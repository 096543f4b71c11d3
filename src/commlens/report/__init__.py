"""Renderers of reports: text (rich), Markdown, HTML, JSON, CSV, plots, Chrome trace."""
