"""examples/fsdp2_train.py, a plain FSDP2 script, traced unchanged: every step's gathers
and reduce-scatters move the model's parameters, block by block, in forward and backward."""

from __future__ import annotations

import runpy
import subprocess
import sysconfig
from pathlib import Path

from commlens.analysis import open_run

EXAMPLE = Path(__file__).parents[2] / "examples" / "fsdp2_train.py"
SCRIPTS = Path(sysconfig.get_path("scripts"))
STEPS = 2


def test_fsdp2_example_moves_its_parameters_each_step(tmp_path: Path) -> None:
    out = tmp_path / "fsdp2"
    cmd = [str(SCRIPTS / "commlens"), "trace", "--out", str(out), "--nproc", "2", "--"]
    cmd += [str(SCRIPTS / "python"), "-c", f"import runpy; runpy.run_path({str(EXAMPLE)!r})"
            f"['main']({STEPS})"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open_run(out) as view:
        rows = view.sql(
            "SELECT step, phase, op, sum(size_bytes) AS bytes, min(role) AS role, "
            "max(role) AS role_hi FROM events WHERE rank = 0 AND step >= 0 "
            "AND op IN ('all_gather', 'reduce_scatter') GROUP BY ALL ORDER BY ALL"
        ).to_pylist()
    blocks = _block_bytes()  # fp32 parameters of each block (the root holds none)
    for step in range(STEPS):
        mine = {(r["phase"], r["op"]): int(r["bytes"]) for r in rows if r["step"] == step}
        assert mine[("forward", "all_gather")] == blocks  # every block gathered once
        assert mine[("backward", "reduce_scatter")] == blocks  # every gradient once
        # each block was resharded after its forward (not the root's: it holds none),
        # so backward gathers every block again
        assert mine[("backward", "all_gather")] == blocks
    assert {(r["role"], r["role_hi"]) for r in rows} == {("dp", "dp")}


def _block_bytes() -> int:
    module = runpy.run_path(str(EXAMPLE))
    return sum(4 * p.numel() for _ in range(4) for p in module["Block"](256).parameters())
