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
    # tbf holds the rate (its 2 ms burst and 20 Hz sampling jitter allow a little over)
    assert 0.1 * rate < util[SLOW_LINK] <= 1.25 * rate, util
    assert f"dp: speedup {speed['dp']:.2f}x from the {SLOW_LINK} link" in demo["proc"].stdout
