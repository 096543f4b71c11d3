"""The job succeeded but its manifest cannot be written: one warning, the job's code.

A run directory deleted under the job and a write that fails half-way (a
file-size limit stands in for a full disk: the write fails with EFBIG after
part of the file is on disk) must not turn a finished job into a traceback,
nor leave a half-written temporary file.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.cli.main import main

LIMIT = 16 * 1024  # bytes: the first manifest fits, the final one does not

# Rank metadata larger than LIMIT, written by the job itself once it lifted the limit.
BIG_RANK = """
import json, resource, sys
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
meta = {"format": "commlens-run-rank", "rank": 0, "notes": "x" * 65536}
open(sys.argv[1] + "/rank-00000.json", "w").write(json.dumps(meta))
raise SystemExit(int(sys.argv[2]))
"""


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big write fails, it does not kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))


@pytest.mark.parametrize("job_code", [0, 3])
def test_write_failing_half_way_is_a_warning_and_leaves_no_temp_file(
    tmp_path: Path, job_code: int
) -> None:
    out = tmp_path / "run"
    job = [sys.executable, "-c", BIG_RANK, str(out), str(job_code)]
    done = subprocess.run(
        [sys.executable, "-m", "commlens", "trace", "--out", str(out), "--", *job],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
    )
    assert done.returncode == job_code, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1, done.stderr
    assert err[0].startswith("commlens trace: warning: the job ended")
    assert "manifest could not be written" in err[0]
    assert sorted(os.listdir(out)) == [".run.live", ".run.lock", "rank-00000.json", "run.json"]
    assert b'"command"' in (out / "run.json").read_bytes()  # the first manifest, whole


def test_run_directory_deleted_under_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for job_code in (0, 3):
        out = tmp_path / f"run{job_code}"
        rm = f"import shutil; shutil.rmtree({str(out)!r}); raise SystemExit({job_code})"
        assert main(["trace", "--out", str(out), "--", sys.executable, "-c", rm]) == job_code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "manifest could not be written" in err[0], err
        assert not out.exists()
