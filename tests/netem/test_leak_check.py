"""The suite's leak check blames a test only for the emulated networks it made.

Other jobs on the same machine make and remove namespaces while a test runs;
one whose owner has just exited (its teardown still under way) was blamed
("the test left emulated networks behind"). A run's record now keeps who made
it (the owner's lineage), so the check knows the maker after it is gone.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.netem.state import forget_owner, load_record, record_path
from tests.conftest import _netns, leftovers, made_here

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="making a network namespace needs root and iproute2",
)


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def _namespace(run_id: str) -> str:
    name = f"commlens-{run_id}-n0"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    return name


def test_another_jobs_namespace_is_not_this_tests_leftover() -> None:
    before = _netns()
    run_id = secrets.token_hex(3)
    dead = _dead_pid()
    # the record another job's cluster wrote: its owner has exited, its teardown runs
    record = {
        "run_id": run_id,
        "owner_pid": dead,
        "owner_start": 1,
        "lineage": [[dead, 1], [1, 1]],
        "namespaces": [f"commlens-{run_id}-n0"],
    }
    record_path(run_id).write_text(json.dumps(record) + "\n")
    name = _namespace(run_id)
    try:
        assert run_id in _netns() - before
        assert not made_here(run_id)
        assert run_id not in leftovers(before)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        forget_owner(run_id)


def test_a_run_made_by_a_child_that_is_gone_is_still_ours() -> None:
    before = _netns()
    run_id = secrets.token_hex(3)
    code = (
        f"from commlens.netem.state import claim_run; import os; claim_run({run_id!r}, os.getpid())"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)  # the child exits
    name = _namespace(run_id)
    try:
        record = load_record(run_id)
        assert record is not None and not record.owner_alive()
        assert made_here(run_id)
        assert run_id in leftovers(before)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        forget_owner(run_id)
