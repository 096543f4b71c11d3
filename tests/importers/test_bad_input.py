"""Bad input to ``commlens import``: one clear line each, nothing left at --out."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from commlens.cli.main import main
from tests.importers.shared import trace


def _fails(args: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["import", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("commlens import: error: "), err
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return err[0]


def test_truncated_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = trace("kineto/hta-nccl_parser_config/nccl_data.json.gz")
    cut = tmp_path / "rank0.json.gz"
    data = src.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    line = _fails([str(cut)], tmp_path / "run", capsys)
    assert "truncated or damaged gzip" in line
    small = tmp_path / "small.json.gz"  # cut inside the head that detection reads
    small.write_bytes(gzip.compress(b'{"traceEvents": [' + b"{}, " * 100)[:40])
    assert "truncated or damaged gzip" in _fails([str(small)], tmp_path / "run", capsys)


def test_truncated_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = trace("kineto/generated-gloo-cpu/rank0.pt.trace.json.gz")
    text = gzip.decompress(src.read_bytes())
    cut = tmp_path / "rank0.json"
    cut.write_bytes(text[: len(text) * 2 // 3])
    assert "ends early" in _fails([str(cut)], tmp_path / "run", capsys)


def test_json_that_is_not_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "config.json"
    other.write_text(json.dumps({"model": "gpt", "layers": [1, 2, 3]}))
    assert "not a trace of any format" in _fails([str(other)], tmp_path / "run", capsys)
    line = _fails([str(other), "--format", "kineto"], tmp_path / "run", capsys)
    assert "not a trace" in line


def test_two_jobs_mixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gloo = trace("kineto/generated-gloo-cpu/rank1.pt.trace.json.gz")
    hta = trace("kineto/hta-nccl_parser_config/nccl_data.json.gz")
    line = _fails([str(gloo), str(hta)], tmp_path / "run", capsys)
    assert "different jobs" in line


def test_a_rank_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = trace("kineto/generated-gloo-cpu/rank0.pt.trace.json.gz")
    copy = tmp_path / "copy-of-rank0.json.gz"
    shutil.copy(src, copy)
    line = _fails([str(src), str(copy)], tmp_path / "run", capsys)
    assert "rank 0 is in two files" in line


def test_no_communication(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = tmp_path / "quiet.json"
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 5.0,
            "args": {},
        }
    ]
    quiet.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "traceEvents": events,
                "distributedInfo": {"rank": 0, "world_size": 1},
            }
        )
    )
    assert "no communication" in _fails([str(quiet)], tmp_path / "run", capsys)


def test_missing_ranks_warn_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = trace("kineto/generated-gloo-cpu/rank1.pt.trace.json.gz")
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["import", str(src), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: ranks 0 of 2 have no trace; the run is written without them" in err
    assert (out / "rank-00001.parquet").exists() and not (out / "rank-00000.parquet").exists()


def test_out_is_kept_when_it_holds_something_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = trace("kineto/generated-gloo-cpu/rank1.pt.trace.json.gz")
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["import", str(src), "--out", str(out), "--force"]) == 2
    assert "not a commlens run" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_fr_format_dispatches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format fr goes to the Flight Recorder reader, or says it is not built."""
    from commlens.importers.registry import NotAvailable, format_module

    dumps = trace("flight_recorder/generated-gloo-cpu")
    try:
        format_module("fr")
    except NotAvailable:
        line = _fails([str(dumps), "--format", "fr"], tmp_path / "run", capsys)
        assert line == "commlens import: error: fr: not available in this build"
        return
    assert main(["import", str(dumps), "--format", "fr", "--out", str(tmp_path / "run")]) == 0


def test_a_file_given_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = trace("kineto/generated-gloo-cpu")
    line = _fails([str(folder), str(folder / "rank0.pt.trace.json.gz")], tmp_path / "run", capsys)
    assert "rank0.pt.trace.json.gz is given twice" in line


def test_a_source_that_is_no_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named pipe, a device and a broken link are named as what they are (never read)."""
    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)
    assert "is a named pipe, not a trace file" in _fails([str(fifo)], tmp_path / "run", capsys)
    zero = tmp_path / "rank1.json"
    zero.symlink_to("/dev/zero")
    assert "is a device, not a trace file" in _fails([str(zero)], tmp_path / "run", capsys)
    broken = tmp_path / "rank2.json"
    broken.symlink_to(tmp_path / "gone.json")
    assert "a broken link" in _fails([str(broken)], tmp_path / "run", capsys)
    assert "no such file" in _fails([str(tmp_path / "none.json")], tmp_path / "run", capsys)
