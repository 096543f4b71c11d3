"""Headless Chromium (Debian's ``chromium``) on a commlens page: what it loaded, logged
and drew, and a screenshot of the first screen."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 1400, 900
"""The window: a laptop's first screen."""

PROBE = """
<script>
(function () {
  const errors = [];
  window.addEventListener("error", (e) => {
    errors.push("error: " + (e.message || (e.target && (e.target.src || e.target.tagName))));
  }, true);
  for (const level of ["error", "warn"]) {
    const was = console[level];
    console[level] = (...args) => { errors.push(level + ": " + args.join(" ")); was(...args); };
  }
  function blank(img) {
    const w = Math.min(img.naturalWidth, 300), h = Math.min(img.naturalHeight, 300);
    if (!w || !h) return true;
    const c = document.createElement("canvas"); c.width = w; c.height = h;
    const g = c.getContext("2d"); g.drawImage(img, 0, 0, w, h);
    const d = g.getImageData(0, 0, w, h).data;
    let other = 0;
    for (let i = 0; i < d.length; i += 4) {
      const diff = Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]);
      if (diff > 30) other++;
    }
    return other < 0.01 * w * h;
  }
  function box(el) {
    if (!el) return null;
    const r = el.getBoundingClientRect();
    return {top: r.top + scrollY, bottom: r.bottom + scrollY, height: r.height};
  }
  window.addEventListener("load", () => {
    const images = [...document.images].map((img) => ({
      alt: img.alt, loaded: img.complete && img.naturalWidth > 0, blank: blank(img),
      box: box(img),
    }));
    const out = {
      errors, images, viewport: innerHeight, title: document.title,
      h1: (document.querySelector("h1") || {}).textContent || "",
      headline: box(document.getElementById("headline")),
      headline_text: (document.getElementById("headline") || {}).textContent || "",
      lead: box(document.getElementById("lead")),
    };
    const pre = document.createElement("pre");
    pre.id = "commlens-probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  });
})();
</script>
"""


def find() -> str | None:
    """The chromium executable, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class Rendered:
    """What the browser saw: the probe's findings and the console lines it logged."""

    probe: dict[str, Any]
    console: list[str]


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = find()
    assert exe is not None
    with tempfile.TemporaryDirectory(prefix="commlens-chromium-") as profile:
        return subprocess.run(
            [
                exe,
                "--headless",
                "--no-sandbox",  # root in a container
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{HEIGHT}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def render(page: Path) -> Rendered:
    """Load a copy of ``page`` with the probe in its head; its findings and console."""
    html = page.read_text()
    probed = page.with_name(page.stem + ".probed.html")
    probed.write_text(html.replace("<head>", "<head>" + PROBE, 1))
    done = _run(
        [
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.resolve().as_uri(),
        ]
    )
    found = re.search(r'<pre id="commlens-probe">(.*?)</pre>', done.stdout, re.S)
    if found is None:
        raise AssertionError(f"the page did not finish loading: {done.stderr[-2000:]}")
    text = found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(json.loads(text), console)


def screenshot(page: Path, out: Path) -> Path:
    """The first screen of ``page`` (WIDTH × HEIGHT) as PNG at ``out``."""
    done = _run(["--screenshot=" + str(out.resolve()), page.resolve().as_uri()])
    if not out.is_file():
        raise AssertionError(f"no screenshot of {page}: {done.stderr[-2000:]}")
    return out
