"""HTA's A100 trace (rank 0 of 2, full comm args): ops, exact bytes, kernel times, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.trace.reader import load_run
from tests.importers.shared import trace

# The 15 all-reduces' element counts (Float) and 6 broadcasts' as the trace's
# record_param_comms args give them, read independently with json.load.


def _expected(path: Path) -> tuple[list[tuple[str, int]], dict[int, tuple[float, float]]]:
    import gzip

    data = json.load(gzip.open(path))
    ops = []
    for e in data["traceEvents"]:
        args = e.get("args") or {}
        if e.get("name") == "record_param_comms" and args.get("Collective name") != "wait":
            size = {"Float": 4, "Long": 8, "Int": 4}[args["dtype"]] * args["In msg nelems"]
            ops.append((args["Collective name"], size, args["External id"]))
    kernels = {
        e["args"]["External id"]: (e["ts"], e["ts"] + e["dur"])
        for e in data["traceEvents"]
        if e.get("cat") == "kernel" and "nccl" in e["name"]
    }
    return ops, kernels


@pytest.fixture(scope="module")
def hta_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = trace("kineto/hta-nccl_parser_config/nccl_data.json.gz")
    out = tmp_path_factory.mktemp("hta") / "run"
    assert main(["import", str(src), "--out", str(out)]) == 0
    return out


def test_ops_bytes_and_kernel_times(hta_run: Path) -> None:
    src = trace("kineto/hta-nccl_parser_config/nccl_data.json.gz")
    expected, kernels = _expected(src)
    run = load_run(hta_run)
    rows = run.events.to_pylist()
    assert sorted(r["op"] for r in rows).count("all_reduce") == 15
    assert sorted(r["op"] for r in rows).count("broadcast") == 6
    assert len(rows) == 21
    got = sorted((r["op"], r["size_bytes"]) for r in rows)
    names = {"allreduce": "all_reduce", "broadcast": "broadcast"}
    assert got == sorted((names[n], b) for n, b, _ in expected)
    # each op's time is its kernel's: the durations are the kernels' durations
    durations = sorted(r["t_end_ns"] - r["t_issue_ns"] for r in rows)
    want = sorted(round((b - a) * 1000) for a, b in kernels.values())
    assert all(abs(d - w) <= 2 for d, w in zip(durations, want, strict=True))
    assert sum(r["size_bytes"] for r in rows) == 307_323_096
    assert {tuple(r["pg_ranks"]) for r in rows} == {(0, 1)}
    # exposure never exceeds the kernel time
    assert all(0 <= r["t_wait_ns"] <= r["t_end_ns"] - r["t_issue_ns"] for r in rows)


def test_manifest_provenance(hta_run: Path) -> None:
    manifest = json.loads((hta_run / "run.json").read_text())
    prov = manifest["import"]
    assert prov["source_format"] == "kineto"
    assert "NCCL 2.17.1" in prov["format_version"]
    assert prov["ranks_present"] == [0] and prov["ranks_missing"] == [1]
    assert prov["files"][0]["sha256"].startswith("c1cf9c575fdc")
    assert prov["device_time"] is True
    assert "kernel" in prov["time_fields"]["t_issue_ns"]
    assert manifest["world_size"] == 2
    assert manifest["time_semantics"] == "device"


def test_report_says_one_rank_of_two(hta_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(hta_run), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["missing_ranks"] == [1]
    ops = {(o["op"], o["count"]) for o in doc["ops"]}
    assert ops == {("all_reduce", 15), ("broadcast", 6)}
    assert main(["report", str(hta_run)]) == 0
    text = capsys.readouterr().out
    assert "missing ranks: 1" in text
    assert "imported" in text and "kineto" in text


def test_exposure_is_the_kernel_time_not_under_compute(hta_run: Path) -> None:
    """Each op's exposed time, computed here from the raw events: its kernel's time not
    covered by any non-NCCL kernel on the same device."""
    import gzip

    data = json.load(gzip.open(trace("kineto/hta-nccl_parser_config/nccl_data.json.gz")))
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    compute = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in kernels
        if "nccl" not in e["name"] and e["args"].get("device") == 0
    )
    merged: list[list[float]] = []
    for a, b in compute:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    want = []
    for e in kernels:
        if "nccl" not in e["name"]:
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        covered = sum(max(0.0, min(b, y) - max(a, x)) for x, y in merged)
        want.append(round((b - a - covered) * 1000))
    got = sorted(r["t_wait_ns"] for r in load_run(hta_run).events.to_pylist())
    assert len(got) == len(want) == 21
    assert all(abs(g - w) <= 2 for g, w in zip(got, sorted(want), strict=True))
    assert sum(want) < sum(round(e["dur"] * 1000) for e in kernels if "nccl" in e["name"])
