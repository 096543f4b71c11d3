"""Kineto details no real sample here shows: truncated group ranks, roles from Megatron
group names, a coalesced block's one kernel, exposure against compute kernels, and
the rank taken from the file name."""

from __future__ import annotations

import json
from pathlib import Path

from commlens.trace.reader import load_run
from tests.importers.shared import imported

BASE = 1_000_000.0  # µs


def _comm(
    ext: int,
    ts: float,
    coll: str,
    n: int,
    pg: str,
    desc: str,
    ranks: str,
    size: int,
    start: int = 0,
    stride: int = 1,
) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "record_param_comms",
        "pid": 10,
        "tid": 11,
        "ts": ts,
        "dur": 20.0,
        "args": {
            "External id": ext,
            "Collective name": coll,
            "In msg nelems": n,
            "Out msg nelems": n,
            "dtype": "BFloat16",
            "Group size": size,
            "Process Group Name": pg,
            "Process Group Description": desc,
            "Process Group Ranks": ranks,
            "Global rank start": start,
            "Global rank stride": stride,
        },
    }


def _kernel(
    name: str, ts: float, dur: float, ext: int | None = None, stream: int = 20, corr: int = -1
) -> dict:
    args = {"device": 0, "stream": stream, "correlation": corr}
    if ext is not None:
        args["External id"] = ext
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def write_trace(path: Path) -> None:
    cut = "[0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, ..., 126]"
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#7",
            "pid": 10,
            "tid": 11,
            "ts": BASE,
            "dur": 10_000.0,
            "args": {},
        },
        # a data-parallel all-reduce over 64 ranks whose list the profiler cut short
        _comm(1, BASE + 100, "allreduce", 1000, "5", "DATA_PARALLEL_GROUP", cut, 64, 0, 2),
        _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", BASE + 200, 1000.0, ext=1),
        # the module and the backward node the ops ran in (with_modules, autograd)
        {
            "ph": "X",
            "cat": "python_function",
            "name": "nn.Module: TransformerBlock_3",
            "pid": 10,
            "tid": 11,
            "ts": BASE + 50,
            "dur": 500.0,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "autograd::engine::evaluate_function: MmBackward0",
            "pid": 10,
            "tid": 11,
            "ts": BASE + 2900,
            "dur": 400.0,
            "args": {},
        },
        # compute overlapping the first half of it
        _kernel("sm90_xmma_gemm", BASE + 150, 550.0, stream=7),
        # a coalesced block: two tensor-parallel all-reduces, one kernel launched at its end
        _comm(2, BASE + 3000, "allreduce", 3000, "9", "TENSOR_MODEL_PARALLEL_GROUP", "[0, 1]", 2),
        _comm(3, BASE + 3100, "allreduce", 1000, "9", "TENSOR_MODEL_PARALLEL_GROUP", "[0, 1]", 2),
        _comm(4, BASE + 3200, "coalesced", 0, "9", "TENSOR_MODEL_PARALLEL_GROUP", "[0, 1]", 2),
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 10,
            "tid": 11,
            "ts": BASE + 3210,
            "dur": 5.0,
            "args": {"correlation": 99},
        },
        _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", BASE + 4000, 800.0, corr=99),
    ]
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "world_size": 128},
        "traceEvents": events,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }
    path.write_text(json.dumps(doc))


def test_synthetic_details(tmp_path: Path) -> None:
    src = tmp_path / "trace_rank3.json"
    write_trace(src)
    out = imported(src, tmp_path / "run")
    run = load_run(out)
    assert run.ranks == [3]  # from the file name: distributedInfo has no rank
    rows = sorted(run.events.to_pylist(), key=lambda r: r["t_issue_ns"])
    assert len(rows) == 3  # the coalesced record is not an op of its own
    dp, tp1, tp2 = rows
    assert dp["pg_ranks"] == list(range(0, 128, 2)) and dp["group_size"] == 64
    assert dp["role"] == "dp" and tp1["role"] == "tp" and tp2["role"] == "tp"
    assert dp["size_bytes"] == 2000 and dp["step"] == 7
    assert dp["module"] == "TransformerBlock_3" and tp1["module"] == ""
    assert (dp["phase"], tp1["phase"], tp2["phase"]) == ("other", "backward", "backward")
    # kernel 200..1200 µs after BASE; compute covers 150..700: 500 µs overlapped
    assert dp["t_end_ns"] - dp["t_issue_ns"] == 1_000_000
    assert dp["t_wait_ns"] == 500_000
    # the block's kernel (800 µs) split by bytes: 3000 and 1000 elements
    assert tp1["t_end_ns"] - tp1["t_issue_ns"] == 600_000
    assert tp2["t_end_ns"] - tp2["t_issue_ns"] == 200_000
    assert tp1["t_end_ns"] == tp2["t_issue_ns"]
    prov = json.loads((out / "run.json").read_text())["import"]
    assert any("group ranks rebuilt from start/stride" in e for e in prov["estimated"])
    assert any("coalesced block" in e for e in prov["estimated"])
