"""Every output format of the report: HTML, Markdown, JSON contract, CSV, suffixes."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.report.formats import format_for

DATA = Path(__file__).parent.parent / "data"
SECTIONS = (
    "ops",
    "steps",
    "ranks",
    "phases",
    "modules",
    "sizes",
    "histogram",
    "skew",
    "stragglers",
    "utilization",
    "throughput",
)


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.stack: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id") or "")
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag == "a":
            self.links.append(a.get("href") or "")
        if tag == "table":
            self.tables += 1
        if tag not in ("img", "meta", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}>"
        self.stack.pop()


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / "tiny_run"))


def test_html_is_self_contained_with_every_section(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(tiny), "-o", str(out)]) == 0
    html = out.read_text()
    parser = _Collect()
    parser.feed(html)
    parser.close()
    assert parser.stack == []
    assert parser.sections == list(SECTIONS)
    assert parser.links == [f"#{key}" for key in SECTIONS]  # the table of contents
    assert parser.tables == len(SECTIONS)
    assert len(parser.images) == 7  # lead, ops, timeline, sizes, histogram, skew, utilization
    assert all(src.startswith("data:image/png;base64,") for src in parser.images)
    assert "http" not in re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    assert "http:" not in html and "https:" not in html
    for title in ("Communication by op and process group", "Stragglers", "Link utilization"):
        assert title in html


def test_markdown_has_tables_and_embedded_plots(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    assert main(["report", str(tiny), "-o", str(out)]) == 0
    md = out.read_text()
    assert md.startswith("# commlens report: gpt-tiny dp+tp, 4 ranks (gloo; tiny_run)")
    assert md.count("\n## ") == len(SECTIONS)
    images = re.findall(r"!\[[^]]*\]\((report_files/[a-z-0-9]+\.png)\)", md)
    assert len(images) == 7
    for image in images:  # PNG files beside the Markdown, linked relatively
        assert (tmp_path / image).read_bytes().startswith(b"\x89PNG")
    assert "| all_reduce | 0 | 0-3 | dp | 4 | 16 | 16,777,216 |" in md


def test_markdown_on_stdout_embeds_the_plots(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tiny), "--format", "md"]) == 0
    assert capsys.readouterr().out.count("](data:image/png;base64,") == 7


def test_json_keeps_the_issue_2_contract(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tiny), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["world_size"] == 4 and data["run"]["format"] == "commlens-run"
    assert set(data["run"]["ranks"]) == {"0", "1", "2", "3"}
    keys = {
        "op",
        "pg_ranks",
        "group_size",
        "role",
        "ranks",
        "count",
        "bytes",
        "time_s",
        "algbw_GBps",
        "busbw_GBps",
    }
    for op in data["ops"]:
        assert keys <= set(op)
    dp = next(o for o in data["ops"] if o["op"] == "all_reduce" and o["role"] == "dp")
    assert dp["pg_ranks"] == [0, 1, 2, 3] and dp["group_size"] == 4
    assert (dp["ranks"], dp["count"], dp["bytes"]) == (4, 16, 16 * (1 << 20))
    assert dp["busbw_GBps"] == pytest.approx(dp["algbw_GBps"] * 1.5)
    for key in (
        "steps",
        "ranks",
        "phases",
        "modules",
        "sizes",
        "histogram",
        "skew",
        "stragglers",
        "utilization",
        "throughput",
        "missing_ranks",
        "warnings",
    ):
        assert key in data


def test_csv_is_tidy(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tiny), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    keys = [(r["op"], r["pg_name"], r["role"], r["size_bucket_bytes"]) for r in rows]
    assert len(keys) == len(set(keys)) == 6  # one row per op x group x size bucket
    dp = next(r for r in rows if r["op"] == "all_reduce" and r["role"] == "dp")
    assert dp["pg_ranks"] == "0-3" and dp["size_bucket_bytes"] == "1048576"
    assert float(dp["wire_bytes_ring"]) == 1.5 * 16 * (1 << 20)
    assert float(dp["wire_bytes_study_b"]) == 2 * 16 * (1 << 20)


def test_output_suffix_picks_the_format(tiny: Path, tmp_path: Path) -> None:
    for suffix, check in (
        (".json", lambda s: json.loads(s)["ops"]),
        (".csv", lambda s: s.startswith('"op"')),
        (".txt", lambda s: s.startswith("commlens report")),
    ):
        out = tmp_path / f"r{suffix}"
        assert main(["report", str(tiny), "-o", str(out)]) == 0
        assert check(out.read_text())
    assert format_for("x.html", None) == "html" and format_for(None, None) == "text"
    assert format_for("x.html", "json") == "json"
    with pytest.raises(UsageError, match="cannot tell the format"):
        format_for("x.pdf", None)


def test_bad_output_is_one_line_and_writes_nothing(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tiny), "-o", str(tmp_path / "r.pdf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot tell the format" in err
    assert main(["report", str(tiny), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert not (tmp_path / "no").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_report_with_missing_and_truncated_ranks(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tiny / "rank-00003.parquet").unlink()
    path = tiny / "rank-00001.parquet"
    path.write_bytes(path.read_bytes()[:1000])
    assert main(["report", str(tiny), "--width", "120"]) == 0
    captured = capsys.readouterr()
    assert "missing ranks: 1,3 (excluded from cross-rank figures)" in captured.out
    assert "rank-00001.parquet is truncated" in captured.out
    assert "rank 3: no events file" in captured.err
    # every group includes rank 1 or rank 3: nothing can be matched across ranks
    assert "Ranks 1,3 are missing" in captured.out
    assert main(["report", str(tiny), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["missing_ranks"] == [1, 3]
    assert data["skew"] == [] and data["stragglers"] == []
    assert {o["ranks"] for o in data["ops"]} <= {1, 2}


def test_json_renderer_nan_and_layout() -> None:
    from commlens.report.document import Document
    from commlens.report.json import JsonRenderer

    doc = Document("t", [], [], data={"a": [1.0, float("nan")], "b": {"c": float("inf")}})
    text = JsonRenderer().render(doc)
    assert json.loads(text) == {"a": [1.0, None], "b": {"c": None}}
    assert text.count("\n") == 4  # one line per top-level key


def _doc_with_every_part() -> Any:
    import pyarrow as pa

    from commlens.report.document import Column, Document, Section

    table = pa.table({"op": ["a", "a", "b"], "t": [1.5, 2.25, None], "v": ["x", "[bold]y[/]", "z"]})
    columns = [Column("op", "op"), Column("t", "t (s)", "{:.2f}"), Column("v", "v", align="right")]
    return Document(
        title="T",
        facts=[("fact", "[red]one[/red]")],
        intro=["the intro line"],
        sections=[Section("s", "", table, columns, group_by="op")],
        notes=["note: [x] stays", "the verdict"],
        data={"k": 1},
    )


def test_document_parts_in_every_format() -> None:
    from commlens.report.html import HtmlRenderer
    from commlens.report.json import JsonRenderer
    from commlens.report.markdown import MarkdownRenderer
    from commlens.report.text import TextRenderer

    doc = _doc_with_every_part()
    text = TextRenderer(width=80).render(doc)
    lines = text.splitlines()
    assert lines[:3] == ["T", "  fact: [red]one[/red]", "the intro line"]  # never read as markup
    assert lines[-2:] == ["note: [x] stays", "the verdict"]
    body = [line.rstrip() for line in lines[lines.index("") + 1 : -3]]
    assert body[2:] == [
        "a     1.50            x",
        "a     2.25   [bold]y[/]",
        "",
        "b        -            z",
    ]
    md = MarkdownRenderer().render(doc)
    assert md.startswith(
        "# T\n\n- **fact**: [red]one[/red]".replace("[", "\\[").replace("]", "\\]")
    )
    assert "| op | t (s) | v |\n| :--- | ---: | ---: |\n| a | 1.50 |" in md
    assert md.endswith("note: \\[x\\] stays  \nthe verdict  \n") and "\n\n\n" not in md
    html = HtmlRenderer().render(doc)
    assert "<p>the intro line</p>" in html and '<p class="note">the verdict</p>' in html
    assert '<td class="num">[bold]y[/]</td>' in html and "<h2>" not in html
    assert json.loads(JsonRenderer().render(doc)) == {"k": 1}


def test_run_summary_document() -> None:
    import pyarrow as pa

    from commlens.report.formats import get_renderer
    from commlens.report.run_summary import run_summary_document
    from commlens.workloads.summary import RunSummary

    ops = pa.table(
        {
            "op": ["all_reduce", "broadcast"],
            "role": ["dp", ""],
            "group_size": [4, 4],
            "calls_per_step": [2.0, 0.5],
            "avg_size_bytes": [1048576.0, 4096.0],
            "time_per_step_s": [0.05, 0.001],
            "share": [0.5, 0.01],
        }
    )
    summary = RunSummary(
        steps=1,
        step_s=0.1,
        comm_s=0.06,
        comm_share=0.6,
        exposed_share=0.2,
        first_loss=10.5,
        last_loss=9.25,
        tokens_per_s=1234.0,
        tflops_per_rank=0.5,
        top_ops=ops,
        warnings=["rank 3: no events file"],
        loss_rank=3,
        pooled_share=0.51,
    )
    doc = run_summary_document(summary, Path("runs/x"))
    text = get_renderer("text", width=100).render(doc)
    assert "  warning: rank 3: no events file" in text
    assert (
        "1 measured step: step 0.100 s · communication 0.060 s (60% of the step, 20% exposed)"
        " · 1,234 tokens/s · 500.00 GFLOP/s per rank · loss (rank 3) 10.5000 → 9.2500"
    ) in " ".join(text.split())  # one step, singular; wrapped at the width
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 100
    assert "top ops by time (per rank per step)" in text
    assert "the lines above are rank 3's own steps" in " ".join(text.split())
    assert "communication share, all ranks taken together (51.0%" in " ".join(text.split())
    row = next(line for line in text.splitlines() if line.startswith("broadcast"))
    assert row.split() == ["broadcast", "-", "4", "0.5", "4,096", "0.0010", "1.0%"]
    assert text.rstrip().endswith("run saved in runs/x; see `commlens report runs/x`")
    data = json.loads(get_renderer("json").render(doc))
    assert data["steps"] == 1 and data["top_ops"][0]["op"] == "all_reduce"
    for fmt in ("md", "html"):
        assert "all_reduce" in get_renderer(fmt).render(doc)


def test_size_histogram_is_bars_over_every_log2_bucket() -> None:
    import pyarrow as pa
    from matplotlib.patches import Rectangle

    from commlens.report.plots import log2_buckets, size_histogram

    assert log2_buckets([8, 64, 8]) == [8, 16, 32, 64]
    assert log2_buckets([0, 1024, 4096]) == [0, 1024, 2048, 4096]
    assert log2_buckets([]) == []
    hist = pa.table(
        {"op": ["all_reduce", "broadcast"], "size_bucket_bytes": [1024, 8192], "count": [3, 1],
         "bytes": [3072, 8192]}
    )  # fmt: skip
    fig = size_histogram(hist)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["1.0 KiB", "2.0 KiB", "4.0 KiB", "8.0 KiB"]  # the empty buckets shown
    assert not ax.get_lines() and sum(isinstance(p, Rectangle) for p in ax.patches) == 8
    assert fig.get_size_inches()[0] >= 9


def test_utilization_plot_spans_the_activity_not_the_nic_samples() -> None:
    import pyarrow as pa

    from commlens.report.plots import utilization

    events = pa.table({"rank": [0, 0, 0], "t_s": [0.0, 1.0, 2.0], "gbit_s": [1.0, 2.0, 1.0]})
    nic = pa.table(
        {"node": [0] * 5, "t_s": [-50.0, -1.0, 0.5, 1.5, 15.0], "tx_gbit_s": [0, 0, 2.0, 2.0, 0]}
    )
    low, high = utilization(events, nic).axes[0].get_xlim()
    assert -0.5 < low < 0 and 2 < high < 2.5
    low, high = utilization(events.slice(0, 0), nic).axes[0].get_xlim()  # NIC only: its traffic
    assert -1 < low < 0.5 and 1.5 < high < 3
    legend = utilization(events, nic).axes[0].get_legend()
    assert legend.get_texts()[0].get_fontsize() >= 10


def test_a_time_that_shows_as_zero_has_no_sign() -> None:
    from commlens.report.document import format_cell

    assert [format_cell(v, "s") for v in (-0.0, -1e-9, 0.0, -0.5)] == [
        "0.000000", "0.000000", "0.000000", "-0.500000"
    ]  # fmt: skip
    assert [format_cell(-1e-12, f) for f in ("ms", "us", "pct", "gbps")] == [
        "0.000", "0.0", "0.0", "0.000"
    ]  # fmt: skip
