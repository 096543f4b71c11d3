"""Launcher for the netem signal tests: ``python launcher.py OUTDIR MODE [ARGS]``.

Runs ``rankprog.py MODE OUTDIR ARGS`` as 2 ranks on 2 emulated nodes at
1 Gbit/s through :func:`commlens.netem.launch_emulated`, writes the topology
to ``OUTDIR/topology.json`` and exits with the job's exit code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from commlens.netem import launch_emulated

if __name__ == "__main__":
    out, mode, rest = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    prog = [sys.executable, str(Path(__file__).with_name("rankprog.py")), mode, str(out), *rest]
    try:
        result = launch_emulated(prog, 2, 2, "1gbit", run_dir=out, grace_s=2.0)
    except KeyboardInterrupt:
        sys.exit(130)
    (out / "topology.json").write_text(json.dumps(result.topology))
    sys.exit(result.exit_code)
