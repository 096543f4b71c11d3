"""``.venv/bin/commlens trace -- torchrun ...`` with no activated environment.

The launcher beside commlens in its ``bin/`` is the one a user means, and the
job must run the Python that has commlens: trace puts that folder first on the
job's PATH when PATH lacks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

PROG = str(Path(__file__).parents[1] / "capture" / "tracedprog.py")
COMMLENS = Path(sysconfig.get_path("scripts")) / "commlens"


def _bare_env() -> dict[str, str]:
    """The environment of a shell where the virtual environment is not activated."""
    scripts = Path(sysconfig.get_path("scripts")).resolve()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    kept = [p for p in path if Path(p).resolve() != scripts]
    env["PATH"] = os.pathsep.join(kept) or "/usr/bin:/bin"
    return env


def test_torchrun_beside_commlens_is_found_without_an_activated_env(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [str(COMMLENS), "trace", "--out", str(out), "--", "torchrun"]
    cmd += ["--standalone", "--nproc_per_node", "2", PROG]
    proc = subprocess.run(cmd, env=_bare_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert sorted(manifest["ranks"]) == ["0", "1"]
    assert all(int(meta["events"]) > 0 for meta in manifest["ranks"].values())


def test_a_command_missing_everywhere_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [str(COMMLENS), "trace", "--out", str(out), "--", "no-such-launcher-xyz"]
    proc = subprocess.run(cmd, env=_bare_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "commlens trace: error: command not found: no-such-launcher-xyz"
    ]
    assert not out.exists()


def test_python_resolves_to_commlens_interpreter(tmp_path: Path) -> None:
    """A bare ``python`` in the traced command is the interpreter commlens runs on."""
    out = tmp_path / "run"
    probe = tmp_path / "which.txt"
    code = f"import sys; open({str(probe)!r}, 'w').write(sys.prefix)"
    cmd = [str(COMMLENS), "trace", "--out", str(out), "--", "python", "-c", code]
    proc = subprocess.run(cmd, env=_bare_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Path(probe.read_text()).resolve() == Path(sys.prefix).resolve()
