"""The device columns (format 2): a GPU op imported from a profiler trace keeps its CPU
issue time and its kernel's stream beside the kernel interval; runs without them
(format 1, captured on a host) still read, with the columns null."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.cli.main import main
from commlens.trace.layout import rank_file
from commlens.trace.manifest import MANIFEST
from commlens.trace.reader import load_run, open_run
from commlens.trace.schema import EVENT_SCHEMA, SCHEMA_KEY
from commlens.trace.writer import EventWriter
from tests.importers.shared import trace

DLRM = "kineto/param-dlrm-8rank/dlrm_kineto.tar.gz"
DLRM_ET = "kineto/param-dlrm-8rank/dlrm_pytorch_et.tar.gz"


def _cpu_and_kernels(archive: Path) -> dict[int, list[tuple[int, int, int]]]:
    """rank -> (record_param_comms start, NCCL kernel start, stream) in ns, read with
    json.load: each NCCL kernel joined to the CPU op of the same External id's launch,
    through the ``ac2g`` flow (an observer independent of the importer's join)."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".json"):
                continue
            data = json.load(tar.extractfile(member))  # type: ignore[arg-type]
            events = data["traceEvents"]
            rpc = sorted(
                (e for e in events if e.get("name") == "record_param_comms"),
                key=lambda e: e["ts"],
            )
            launches = {
                e["args"]["correlation"]: e
                for e in events
                if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaLaunchKernel"
            }
            rows = []
            for k in events:
                if k.get("cat") != "kernel" or "nccl" not in k["name"]:
                    continue
                launch = launches[k["args"]["correlation"]]
                # the record_param_comms that was running when the kernel was launched
                owner = max(
                    (o for o in rpc if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"]),
                    key=lambda o: o["ts"],
                )
                rows.append((round(owner["ts"] * 1000), round(k["ts"] * 1000), k["args"]["stream"]))
            out[data["distributedInfo"]["rank"]] = sorted(rows)
    return out


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dlrm") / "run"
    assert main(["import", str(trace(DLRM)), str(trace(DLRM_ET)), "--out", str(out)]) == 0
    return out


def test_dlrm_keeps_each_ops_cpu_issue_and_stream(dlrm: Path) -> None:
    want = _cpu_and_kernels(trace(DLRM))
    with open_run(dlrm, quiet=True) as view:
        assert view.manifest["import"]["time_fields"]["t_cpu_issue_ns"]
        for rank in range(8):
            events = view.read_rank(rank, ["seq", "t_issue_ns"], align=False).to_pylist()
            device = view.read_device(rank, align=False).to_pylist()
            assert [d["seq"] for d in device] == [e["seq"] for e in events]
            got = sorted(
                (d["t_cpu_issue_ns"], e["t_issue_ns"], d["stream"])
                for d, e in zip(device, events, strict=True)
            )
            assert got == want[rank]
            # the CPU issue precedes the kernel's start, on the rank's own clock
            assert all(cpu < start for cpu, start, _ in got)


def test_dlrm_cpu_issue_times_move_with_the_rank_clock(dlrm: Path) -> None:
    with open_run(dlrm, quiet=True) as view:
        for rank in range(8):
            aligned = view.read_rank(rank, ["t_issue_ns"]).column(0).to_numpy()
            own = view.read_rank(rank, ["t_issue_ns"], align=False).column(0).to_numpy()
            cpu = view.read_device(rank).column("t_cpu_issue_ns").to_numpy()
            cpu_own = view.read_device(rank, align=False).column("t_cpu_issue_ns").to_numpy()
            # the same shift as the kernel times (a rank on another host moves)
            assert ((cpu - cpu_own) == (aligned - own)).all()


_HEAD = (0,)  # rank
_SIZES = ("all_reduce", "python", "0", [0], 1, "", "float32", 4, 16, 16, 16)


def _device_run(tmp_path: Path) -> Path:
    """A one-rank run written by a device writer: two ops with CPU issue times and
    streams, one without (null)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / MANIFEST).write_text(
        json.dumps({"format": "commlens-run", "world_size": 1, "time_semantics": "device"})
    )
    writer = EventWriter(run, 0, device=True)
    rows = [(1_000, 1_500, 2_500, 7), (3_000, 3_200, 4_000, 13), (None, 5_000, 6_000, None)]
    for seq, (cpu, start, end, stream) in enumerate(rows):
        times = (start, end, end - start, (end - start) / 1e9)
        writer.append((*_HEAD, seq, *_SIZES, None, True, *times, 0, "other", "", cpu, stream))
    writer.close()
    return run


def test_device_columns_round_trip_through_the_writer(tmp_path: Path) -> None:
    run = _device_run(tmp_path)
    schema = pq.ParquetFile(rank_file(run, 0)).schema_arrow
    assert schema.field("t_cpu_issue_ns").type == pa.int64()
    assert schema.field("stream").type == pa.int32()
    assert schema.metadata[SCHEMA_KEY] == b"2"
    with open_run(run, quiet=True) as view:
        got = view.read_device(0).to_pylist()
    assert got == [
        {"seq": 0, "t_cpu_issue_ns": 1_000, "stream": 7},
        {"seq": 1, "t_cpu_issue_ns": 3_000, "stream": 13},
        {"seq": 2, "t_cpu_issue_ns": None, "stream": None},
    ]
    events = load_run(run, quiet=True).events
    assert events.column_names == EVENT_SCHEMA.names  # the device columns only on request
    assert events.column("t_issue_ns").to_pylist() == [1_500, 3_200, 5_000]


def test_format_one_runs_read_with_null_device_columns(
    dlrm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A device run as format 1 wrote it (no device columns, version 1): every command
    reads it as before, and the device columns read as null."""
    old = tmp_path / "old"
    old.mkdir()
    for path in dlrm.iterdir():
        if path.name.startswith("rank-") and path.suffix == ".parquet":
            table = pq.read_table(path).select(EVENT_SCHEMA.names)
            meta = {**(table.schema.metadata or {}), SCHEMA_KEY: b"1"}
            pq.write_table(table.replace_schema_metadata(meta), old / path.name)
        elif path.is_file():
            (old / path.name).write_bytes(path.read_bytes())
    with open_run(old, quiet=True) as view:
        device = view.read_device(0)
        assert device.num_rows == 8
        assert device.column("t_cpu_issue_ns").null_count == 8
        assert device.column("stream").null_count == 8
    assert load_run(old, quiet=True).events.equals(load_run(dlrm, quiet=True).events)
    for argv in (["report", str(old)], ["compare", str(old), str(dlrm)], ["validate", str(old)]):
        assert main(argv) == 0, argv
    capsys.readouterr()
    assert main(["report", str(old), "--format", "json"]) == 0
    report_old = json.loads(capsys.readouterr().out)
    assert main(["report", str(dlrm), "--format", "json"]) == 0
    report_new = json.loads(capsys.readouterr().out)
    for key in ("ops", "steps", "ranks", "phases", "skew"):
        assert report_new[key] == report_old[key], key


def test_host_runs_have_null_device_columns(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / MANIFEST).write_text(json.dumps({"format": "commlens-run", "world_size": 1}))
    writer = EventWriter(run, 0)
    writer.append((*_HEAD, 0, *_SIZES, None, False, 100, 200, 100, 1e-7, 0, "other", ""))
    writer.close()
    assert "stream" not in pq.ParquetFile(rank_file(run, 0)).schema_arrow.names
    with open_run(run, quiet=True) as view:
        assert view.read_device(0).to_pylist() == [
            {"seq": 0, "t_cpu_issue_ns": None, "stream": None}
        ]
