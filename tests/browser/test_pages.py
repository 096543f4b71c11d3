"""Each HTML page kind rendered in headless Chromium: it loads with nothing logged to the
console, every plot is there and drawn, and the first screen holds the headline and
the chart that carries it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.browser import chromium
from tests.browser.pages import KINDS, make_pages

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        chromium.find() is None,
        reason="chromium is not installed and could not be (`make test` installs Debian's "
        "chromium as root with apt-get)",
    ),
]

LEAD = ("report", "compare", "sweep", "bench")
"""The pages whose answer is a chart (validate's is its verdict)."""


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pages(tmp_path_factory.mktemp("pages"))


@pytest.mark.parametrize("kind", KINDS)
def test_the_page_loads_clean_draws_every_plot_and_opens_with_its_answer(
    pages: dict[str, Path], kind: str
) -> None:
    seen = chromium.render(pages[kind])
    probe = seen.probe
    assert seen.console == [] and probe["errors"] == []
    html = pages[kind].read_text()
    assert len(probe["images"]) == html.count("<img ")
    for image in probe["images"]:
        assert image["loaded"] and not image["blank"], image["alt"]
    screen = probe["viewport"]
    assert probe["headline"] is not None and probe["headline_text"].strip()
    assert probe["headline"]["bottom"] <= screen
    if kind in LEAD:
        assert probe["lead"] is not None and probe["lead"]["bottom"] <= screen
    if probe["lead"] is not None:
        assert probe["lead"]["top"] >= probe["headline"]["bottom"]
    assert probe["h1"] and probe["h1"] == probe["title"]
    assert not probe["h1"].endswith(": run")  # says what was run, not a folder's name
    if kind in ("report", "whatif"):
        assert "gpt-tiny" in probe["h1"], probe["h1"]  # the workload, from the manifest


def test_the_checks_see_a_blank_plot_a_broken_one_and_a_buried_headline(
    tmp_path: Path,
) -> None:
    """The same probe on a page with the defects planted: each is reported."""
    from matplotlib.figure import Figure

    from commlens.report.plots import png

    blank = base64.b64encode(png(Figure(figsize=(4, 3)))).decode()
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>t</title></head><body><h1>t</h1>"
        '<div style="height:3000px"></div><div id="headline">late</div>'
        f'<img alt="blank" src="data:image/png;base64,{blank}">'
        '<img alt="broken" src="data:image/png;base64,AAAA"></body></html>'
    )
    probe = chromium.render(page).probe
    found = {i["alt"]: i for i in probe["images"]}
    assert found["blank"]["loaded"] and found["blank"]["blank"]
    assert not found["broken"]["loaded"]
    assert probe["errors"]  # the broken image's load error
    assert probe["headline"]["bottom"] > probe["viewport"]


def test_the_doctor_page_opens_with_its_diagnosis(tmp_path: Path) -> None:
    """doctor's page has no chart: its answer is its title, on the first screen."""
    import json

    from commlens.cli.main import main

    run = Path(__file__).resolve().parent.parent / "data" / "tiny_run"
    page, answer = tmp_path / "doctor.html", tmp_path / "doctor.json"
    assert main(["doctor", str(run), "-o", str(page)]) == 0
    assert main(["doctor", str(run), "-o", str(answer)]) == 0
    seen = chromium.render(page)
    probe = seen.probe
    assert seen.console == [] and probe["errors"] == []
    assert probe["h1"] == probe["title"] == json.loads(answer.read_text())["headline"]
    assert probe["h1"].startswith("healthy")
