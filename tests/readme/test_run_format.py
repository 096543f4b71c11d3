"""The README's pandas snippet (section "The run format") runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "tiny_run"


def _snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The run format") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "no python block in the run format section"
    return found.group(1)


def test_readme_pandas_snippet_reads_aligned_and_raw_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _snippet().replace("runs/gpt-tp", str(TINY))  # the checked-in 4-rank run
    names: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), names)
    assert "all_reduce" in capsys.readouterr().out
    events, raw = names["events"], names["raw"]
    aligned = events[events["rank"] == 1].sort_values("seq")["t_issue_ns"].to_numpy()  # type: ignore[index]
    own = raw.sort_values("seq")["t_issue_ns"].to_numpy()  # type: ignore[attr-defined]
    assert ((aligned - own) == 5000).all()  # rank 1's measured clock offset: 5 µs


def test_readme_snippet_names_the_run_the_tour_makes() -> None:
    assert 'load_run("runs/gpt-tp")' in _snippet()
    assert "--out runs/gpt-tp" in (ROOT / "README.md").read_text()
