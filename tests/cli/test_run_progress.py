"""`commlens run` says where it is before step 1: ranks started, joined, model built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


def test_progress_before_the_first_step(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "commlens", "run", "--model", "gpt-tiny", "--scheme", "dp"]
    argv += ["--nproc-per-node", "2", "--steps", "1", "--warmup-steps", "0"]
    argv += ["--out", str(tmp_path / "run"), "--width", "100"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("commlens run: gpt-tiny · dp · dp=2 tp=1 pp=1 · 2 ranks (gloo)")
    order = [
        "starting 2 ranks...",
        "all 2 ranks joined the process group in ",
        "model built in ",
        "step 1/1  loss",
        "1 measured step: step ",
    ]
    found = [next(i for i, line in enumerate(lines) if line.startswith(o)) for o in order]
    assert found == sorted(found), lines
    assert lines[found[2]].endswith("step 1/1 running...")
