"""Every figure says what it counts: the Steps table's sums, the headline's steps."""

from __future__ import annotations

from pathlib import Path

from commlens.analysis import step_table
from commlens.report.build import build_report
from commlens.trace.reader import open_run

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_run"


def test_the_steps_table_says_its_ops_and_bytes_are_all_ranks_together() -> None:
    with open_run(TINY) as run:
        doc = build_report(run)
        per_rank = step_table(run).to_pylist()
    section = doc.section("steps")
    assert "mean over ranks" in section.title and "ops and bytes: all ranks" in section.title
    for row in section.table.to_pylist():
        mine = [r for r in per_rank if r["step"] == row["step"]]
        assert row["ops"] == sum(r["ops"] for r in mine)  # a sum, as the title says
        assert row["bytes"] == sum(r["bytes"] for r in mine)
        assert row["comm_s"] == sum(r["comm_s"] for r in mine) / len(mine)  # a mean


def test_the_headline_says_the_tables_count_more_than_it_does() -> None:
    with open_run(TINY) as run:
        doc = build_report(run)
    stragglers = doc.section("stragglers").table.to_pylist()
    table_count = max(r["last_count"] for r in stragglers)
    headline = next(line for line in doc.highlights if "last to arrive" in line)
    head_count = int(headline.split("last to arrive ")[1].split(" times")[0])
    assert head_count < table_count  # step 1 only against both steps: 3 against 6
    scope = doc.highlights[-1]
    assert scope.startswith("headline covers step 1 of 2 recorded steps")
    assert "the tables below cover every event, set-up included" in scope
    assert "Ranks (summed over the recorded steps" in doc.section("ranks").title
