"""Start-up cost: help and ``trace``'s own process load no heavy library.

``commlens --help`` builds every subcommand's parser, so each CLI module may
import only argparse-level things at its top; ``commlens trace`` itself must
not import torch (each traced rank does, the launcher has no need).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.cli.main import SUBCOMMANDS

HEAVY = ("torch", "duckdb", "pyarrow", "numpy", "pandas", "rich")

# Runs main(ARGV) (SystemExit from --help is expected) and prints the heavy modules loaded.
PROBE = """
import json, sys
from commlens.cli.main import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit:
    pass
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)), file=sys.stderr)
"""


def loaded_by(argv: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in SUBCOMMANDS)])
def test_help_loads_no_heavy_library(argv: list[str]) -> None:
    assert loaded_by(argv) == []


def test_trace_process_itself_does_not_import_torch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    loaded = loaded_by(["trace", "--out", str(out), "--", sys.executable, "-c", "pass"])
    assert "torch" not in loaded
    manifest = json.loads((out / "run.json").read_text())
    import torch

    assert manifest["torch_version"] == torch.__version__
    assert manifest["launcher"]["exit_code"] == 0
