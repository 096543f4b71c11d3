"""``report`` reads a run's events rank by rank: no query over the run's view returns
rows that grow with the whole run (its memory would then grow with the run, not with
the largest rank file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from commlens.report.build import build_report
from commlens.trace.reader import RunView, open_run
from commlens.trace.synthetic import Spec, generate


def test_no_query_returns_the_runs_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 16-rank run on 2 nodes, 8 steps: every table the report pulls out of the view
    (the timeline's three steps the largest) holds under half the run's events."""
    planted = generate(tmp_path / "run", Spec(tp=2, pp=2, dp=4, steps=8))
    sizes: list[tuple[int, str]] = []
    sql = RunView.sql

    def counted(self: RunView, query: str, params: Any = None) -> pa.Table:
        table = sql(self, query, params)
        sizes.append((table.num_rows, " ".join(query.split())[:120]))
        return table

    monkeypatch.setattr(RunView, "sql", counted)
    with open_run(tmp_path / "run") as view:
        doc = build_report(view)
    assert doc.data["inter_node_utilization"]  # the run is on two nodes
    assert sizes
    biggest = max(sizes)
    assert biggest[0] < planted.events // 2, biggest
