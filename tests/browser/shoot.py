"""Screenshots of HTML pages' first screens for docs/gallery:
``python -m tests.browser.shoot OUT_DIR KIND=PAGE.html ...`` writes OUT_DIR/page-KIND.png."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.browser import chromium


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for item in argv[1:]:
        kind, _, page = item.partition("=")
        shot = chromium.screenshot(Path(page), out / f"page-{kind}.png")
        print(
            f"{shot} ({shot.stat().st_size:,} bytes) from {page} "
            f"({Path(page).stat().st_size:,} bytes)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
