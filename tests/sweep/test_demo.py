"""`commlens demo` (what `make demo` runs), as the installed command would run it.

As root the demo is Study A in small: gpt-tiny on 2 emulated nodes × 2 ranks
under DP, TP and PP over a 100 Mbit/s and an unshaped link, so its catalog
must show Study A's findings: DP gains more from the faster link than TP and
PP, and DP's all-reduce takes a larger share of the step on the slow link.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commlens.netem import parse_rate
from commlens.sweep import findings, open_catalog
from commlens.sweep.demo import SLOW_LINK, emulation_available

# the demo is a few minutes of real training; on a loaded 2-core machine, more
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("demo") / "demo-out"
    proc = subprocess.run(
        [sys.executable, "-m", "commlens", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {"out": out, "proc": proc}


def test_demo_finishes_and_names_an_html_report_that_exists(demo: dict[str, Any]) -> None:
    proc = demo["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"HTML report: (\S+)", proc.stdout)
    assert found, proc.stdout
    html = Path(found.group(1))
    assert html.is_file() and html.parent == demo["out"].resolve()
    assert html.read_text().count("data:image/png;base64") >= 1
    assert "the demo's points" in proc.stdout and "validate" in proc.stdout
    con = open_catalog(demo["out"] / "sweep")
    rows = con.execute("SELECT scheme, status, validate_ok FROM points").fetchall()
    assert {r[0] for r in rows} == {"dp", "tp", "pp"}
    assert all(r[1] == "ok" and r[2] for r in rows), rows
    emulated, _ = emulation_available()
    if not emulated:
        assert "loopback only" in proc.stdout


@pytest.mark.root
def test_demo_shows_study_a(demo: dict[str, Any]) -> None:
    if not emulation_available()[0]:
        pytest.skip("needs root and network namespaces")
    assert demo["proc"].returncode == 0
    con = open_catalog(demo["out"] / "sweep")
    speed = {r["scheme"]: r["speedup"] for r in findings.link_speedup(con).to_pylist()}
    assert set(speed) == {"dp", "tp", "pp"}
    assert speed["dp"] > 1.2, speed
    assert speed["dp"] > speed["tp"] and speed["dp"] > speed["pp"], speed
    dp = [r for r in findings.shares_by_link(con).to_pylist() if r["scheme"] == "dp"]
    # the all-reduce's transfer (after every rank arrived) grows as the link slows;
    # its wait for the last rank is compute skew, whatever the link
    by_link = {r["link"]: r["allreduce_transfer_share"] for r in dp}
    assert by_link[SLOW_LINK] > by_link["unshaped"], by_link
    util = {r["link"]: r["peak_gbit_s"] for r in findings.link_utilization(con).to_pylist()}
    rate = parse_rate(SLOW_LINK) / 1e9
    # the shaper holds the rate (its burst and 20 Hz sampling jitter allow a little over)
    assert 0.1 * rate < util[SLOW_LINK] <= 1.25 * rate, util
    assert f"dp: speedup {speed['dp']:.2f}x from the {SLOW_LINK} link" in demo["proc"].stdout


def _record(scheme: str, network: str, status: str = "ok") -> dict[str, Any]:
    layout = {"dp": (4, 1, 1), "tp": (1, 4, 1), "pp": (2, 1, 2)}[scheme]
    ops = [
        {"op": "all_reduce", "role": scheme, "share_of_step": 0.5},
        {"op": "recv", "role": "pp", "share_of_step": 0.25},
    ]
    rec: dict[str, Any] = {
        "id": f"gpt-tiny_{scheme}_{network}",
        "status": status,
        "error": "" if status == "ok" else "timed out after 1 s",
        "network": network,
        "config": dict(zip(("dp", "tp", "pp"), layout, strict=True), scheme=scheme),
    }
    if status == "ok":
        rec["result"] = {
            "metrics": {"step_s": 0.0982, "comm_share": 0.79, "tokens_per_s": 1304.0},
            "ops": ops,
            "validation": {"ok": True},
        }
    return rec


def test_the_demo_summary_in_every_format(tmp_path: Path) -> None:
    import json

    from commlens.report.formats import get_renderer
    from commlens.report.sweep_summary import demo_document

    records = [_record("dp", "2 nodes, 100mbit"), _record("pp", "2 nodes, unshaped", "failed")]
    speed = [
        {"scheme": "dp", "speedup": 4.01, "slowest_link": "100mbit", "fastest_link": "unshaped",
         "slowest_step_s": 0.0825, "fastest_step_s": 0.0206}
    ]  # fmt: skip
    doc = demo_document(records, speed, tmp_path / "report.html", tmp_path / "sweep")
    narrow = get_renderer("text", width=100).render(doc)
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= 100
    text = get_renderer("text", width=200).render(doc)
    assert text.startswith("the demo's points (median step after warm-up)")
    rows = [line.split() for line in text.splitlines() if line.startswith(("dp ", "pp "))]
    dp = "dp 4×1×1 2 nodes, 100mbit 0.0982 - 79% all_reduce/dp 50% ok".split()
    assert rows[0] == dp
    assert rows[1] == [
        *"pp 2×1×2 2 nodes, unshaped - - -".split(),
        *"timed out after 1 s - -".split(),
    ]
    assert "dp: speedup 4.01x from the 100mbit link to the unshaped one" in text
    assert re.search(r"HTML report: (\S+)", text)[1] == str((tmp_path / "report.html").resolve())
    md = get_renderer("md").render(doc)
    assert md.startswith("## the demo's points") and "| dp | 4×1×1 |" in md
    html = get_renderer("html").render(doc)
    assert "<title>commlens</title>" in html and "HTML report:" in html
    data = json.loads(get_renderer("json").render(doc))
    assert [p["status"] for p in data["points"]] == ["ok", "failed"] and data["speedup"] == speed


def test_the_sweep_summary_and_list_in_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from commlens.cli.main import main
    from commlens.report.formats import get_renderer
    from commlens.report.sweep_summary import outcome_document, status_line
    from commlens.sweep.runner import SweepOutcome

    ok, failed = _record("dp", "loopback"), _record("tp", "loopback", "failed")
    outcome = SweepOutcome(
        tmp_path, [], ran=[ok["id"]], failed=[failed["id"]], records=[ok, failed]
    )
    doc = outcome_document("t", outcome, report="r.html", figures=[tmp_path / "f.png"])
    text = get_renderer("text", width=100).render(doc)
    assert text.startswith("sweep t: 0 points · 1 run now · 0 already done · 0 skipped · 1 failed")
    assert f"catalog: {tmp_path / 'catalog.duckdb'}" in text and "report: r.html" in text
    assert f"figure: {tmp_path / 'f.png'}" in text and "timed out after 1 s" in text
    assert status_line(ok).startswith("done    gpt-tiny_dp_loopback: step 0.098 s, comm 79%")
    assert status_line(failed) == "failed  gpt-tiny_tp_loopback: timed out after 1 s"
    data = json.loads(get_renderer("json").render(doc))
    assert data["ok"] is False and data["failed"] == [failed["id"]]
    assert [p["status"] for p in data["points"]] == ["ok", "failed"]
    for fmt in ("md", "html"):
        assert "timed out after 1 s" in get_renderer(fmt).render(doc)
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nname = "s"\n[grid]\nmodel = ["gpt-tiny"]\nscheme = ["dp", "tp"]\n')
    assert main(["sweep", str(spec), "--list", "--format", "json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert [p["id"].split("_")[1] for p in points] == ["dp", "tp"]
    assert main(["sweep", str(spec), "--list", "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("# sweep s: 2 points\n\n| \\# | point |")
