"""Every HTML page opens with its answer: the headline box, then the chart that carries
it, then the facts and tables; the report's step chart draws the measured steps only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from commlens.report.build import build_report, measured_steps, run_title
from commlens.report.document import Column, Document, Section
from commlens.report.html import HtmlRenderer
from commlens.trace.reader import open_run
from commlens.trace.synthetic import ev, write_run

DATA = Path(__file__).resolve().parent.parent / "data"


def _long_setup_run(tmp: Path) -> Path:
    """Two ranks: a 900 ms set-up broadcast (step -1), then four 20 ms steps."""
    events: list[dict[str, Any]] = []
    steps: dict[int, list[tuple[float, float]]] = {}
    for r in (0, 1):
        events.append(ev(r, "broadcast", 0, 900_000, pg_ranks=[0, 1], step=-1))
        windows = []
        for s in range(4):
            t = 1_000_000 + s * 20_000
            windows.append((t, t + 20_000))
            events.append(ev(r, "all_reduce", t + 10_000, t + 15_000, pg_ranks=[0, 1], step=s))
        steps[r] = windows
    extra = {
        "workload": {"model": {"name": "gpt-tiny"}, "scheme": "dp", "dims": {"dp": 2}},
        "topology": {"nodes": 1, "link": None},
    }
    return write_run(tmp / "run", events, world_size=2, steps=steps, extra=extra)


def test_the_step_chart_leaves_set_up_and_warm_up_out_and_says_so(tmp_path: Path) -> None:
    view = open_run(_long_setup_run(tmp_path))
    doc = build_report(view)
    assert doc.lead is not None
    steps = pa.Table.from_pylist(doc.data["steps"])  # type: ignore[call-overload]
    drawn, left_out = measured_steps(steps, (1, 4))
    assert drawn.column("step").to_pylist() == [1, 2, 3]  # set-up and warm-up step 0 out
    assert max(drawn.column("step_s").to_pylist()) < 0.05  # so the 0.9 s never sets the scale
    assert left_out.startswith("not drawn: set-up (")
    assert "warm-up step 0" in left_out
    assert doc.title == "commlens report: gpt-tiny dp, dp×tp×pp 2, 2 ranks (gloo; run)"
    assert run_title(view) == doc.title


def _order(html: str, *marks: str) -> list[int]:
    return [html.index(m) for m in marks]


def test_the_report_page_opens_with_the_headline_then_its_chart(tmp_path: Path) -> None:
    html = HtmlRenderer().render(build_report(open_run(_long_setup_run(tmp_path))))
    at = _order(html, "<h1>", 'id="headline"', 'id="lead"', '<details class="facts"', "<section")
    assert at == sorted(at)
    assert "communication covers" in html[at[1] : at[2]]  # the highlights are the headline
    assert html[at[2] : at[3]].count("<img") == 1


def test_a_headline_takes_the_box_and_the_highlights_follow() -> None:
    table = pa.table({"x": [1]})
    doc = Document(
        "validate: gpt-tiny",
        facts=[("steps held", "1..3")],
        sections=[Section("ops", "ops", table, [Column("x", "x", "int")])],
        notes=["validate: mismatch in all_reduce/dp"],
        headline=["validate: mismatch in all_reduce/dp"],
        highlights=["a detail"],
    )
    html = HtmlRenderer().render(doc)
    box = html[html.index('id="headline"') : html.index("</div>", html.index('id="headline"'))]
    assert "validate: mismatch in all_reduce/dp" in box and "a detail" not in box
    assert 'class="headline bad"' in html  # a mismatch is drawn as one
    assert html.index("a detail") < html.index("<section")


def test_busbw_lines_never_join_two_groups() -> None:
    """A pipeline's dp all-reduces (256 KiB) and pp all-reduces (128 KiB): two lines of
    one point each, not one line from the dp point to the pp point."""
    from commlens.report.plots import busbw_vs_size

    sizes = pa.Table.from_pylist(
        [
            {
                "op": "all_reduce",
                "pg_name": "1",
                "role": "dp",
                "size_bucket_bytes": 262144,
                "time_s": 0.01,
                "busbw_GBps": 0.5,
            },
            {
                "op": "all_reduce",
                "pg_name": "3",
                "role": "pp",
                "size_bucket_bytes": 131072,
                "time_s": 0.01,
                "busbw_GBps": 0.1,
            },
        ]
    )
    lines = busbw_vs_size(sizes).axes[0].get_lines()
    assert sorted(len(line.get_xdata()) for line in lines) == [1, 1]
    assert {line.get_label() for line in lines} == {
        "all_reduce [group 1, dp]",
        "all_reduce [group 3, pp]",
    }


def test_plots_cover_the_headlines_steps_and_whole_run_tables_say_so(tmp_path: Path) -> None:
    """The set-up broadcast is in the op table (labelled 'every event, set-up included')
    but not in the op-share plot drawn beside it, which covers the measured steps."""
    doc = build_report(open_run(_long_setup_run(tmp_path)))
    ops_section = doc.section("ops")
    assert "broadcast" in ops_section.table.column("op").to_pylist()
    assert ops_section.scope == "every event, set-up included"
    fig = ops_section.plots[0][1]()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["all_reduce"]
    assert "measured steps 1–3" in ax.get_title()
    html = HtmlRenderer().render(doc)
    assert '<span class="scope">(every event, set-up included)</span>' in html
