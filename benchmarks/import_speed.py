# ruff: noqa: E501  (the event templates are one JSON line each)
"""Benchmark: ``commlens import`` of a large PyTorch profiler trace, beside ``json.load``.

    .venv/bin/python benchmarks/import_speed.py [--mb 64] [--gzip]
    .venv/bin/python benchmarks/import_speed.py --mb 1024     # the figure that counts

Writes one synthetic Kineto trace of about ``--mb`` MB of JSON (rank 0 of 2 on
an A100-like device, the event mix of a real trace: per training step
thousands of ``aten::*`` CPU ops, their kernel launches and flow events,
compute kernels and memcpys, and a few ``record_param_comms`` with their NCCL
kernels, about 1% of the events), then runs as child processes, each timed
with ``wait4``:

- ``commlens import FILE --out RUN`` (streaming: only comm ops, their kernels
  and annotations are kept);
- ``python -c "json.load(open(FILE))"``, what a reader that loads the whole
  document pays.

Prints MB/s of trace JSON per CPU second and peak RSS for both. Targets:
>= 50 MB/s per core and <= 1 GiB peak RSS for the 1 GB trace. The generator
is not timed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import IO

from _child import run_child

BASE_US = 4_458_676_000_000.0
STEP_US = 200_000.0


def _write_trace(out: IO[str], target: int, seed: int = 0) -> tuple[int, int, int]:
    """Events until ``target`` bytes; returns (events, comm ops, steps)."""
    rng = random.Random(seed)
    head = {
        "schemaVersion": 1,
        "distributedInfo": {
            "backend": "nccl",
            "rank": 0,
            "world_size": 2,
            "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}],
            "nccl_version": "2.21.5",
        },
    }
    text = json.dumps(head)[:-1] + ', "traceEvents": [\n'
    out.write(text)
    written = len(text)
    events = comms = 0
    ext = corr = 1
    step = 0
    t = BASE_US
    first = True
    while written < target:
        # one step: ProfilerStep, many ops, a few all-reduces at the end of backward
        lines = [
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 77, '
            f'"tid": 77, "ts": {t:.3f}, "dur": {STEP_US:.3f}, "args": {{"External id": {ext}}}}}'
        ]
        cursor = t + 10.0
        for i in range(4000):
            dur = rng.uniform(2.0, 30.0)
            lines.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "aten::{rng.choice(("mm", "add", "mul", "gelu", "layer_norm", "softmax"))}", '
                f'"pid": 77, "tid": 77, "ts": {cursor:.3f}, "dur": {dur:.3f}, "args": {{"External id": {ext + i}, '
                f'"Record function id": 0, "Sequence number": {i}, "Fwd thread id": 0, "Ev Idx": {i}, '
                f'"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}}}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": 77, '
                f'"ts": {cursor + 1:.3f}, "dur": 4.100, "args": {{"External id": {ext + i}, "cbid": 211, "correlation": {corr}}}}}'
            )
            lines.append(
                f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {cursor + 40:.3f}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}'
            )
            lines.append(
                f'{{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7, '
                f'"ts": {cursor + 40:.3f}, "dur": {dur * 1.5:.3f}, "args": {{"External id": {ext + i}, "queued": 0, '
                f'"device": 0, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 96, '
                f'"shared memory": 0, "blocks per SM": 1.8, "warps per SM": 14.2, "grid": [128, 1, 1], '
                f'"block": [256, 1, 1], "est. achieved occupancy %": 22}}}}'
            )
            corr += 1
            if i % 400 == 399:  # a bucket all-reduce on the comm stream
                n = rng.choice((1 << 20, 4 << 20, 6_563_840))
                comm_args = (
                    f'"Collective name": "allreduce", "In msg nelems": {n}, "Out msg nelems": {n}, '
                    f'"Group size": 2, "dtype": "Float", "In split size": "[]", "Out split size": "[]", '
                    f'"Process Group Name": "0", "Process Group Description": "default_pg", '
                    f'"Process Group Ranks": "[0, 1]"'
                )
                cid = ext + 10_000 + i
                lines.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 77, "tid": 78, '
                    f'"ts": {cursor + 2:.3f}, "dur": 180.0, "args": {{"External id": {cid}, {comm_args}}}}}'
                )
                lines.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", '
                    f'"pid": 0, "tid": 40, "ts": {cursor + 60:.3f}, "dur": 900.0, "args": {{"External id": {cid}, '
                    f'"device": 0, "stream": 40, "correlation": {corr}, {comm_args}}}}}'
                )
                corr += 1
                comms += 1
            cursor += dur + 1.0
        ext += 20_000
        chunk = ",\n".join(lines)
        if not first:
            chunk = ",\n" + chunk
        first = False
        out.write(chunk)
        written += len(chunk)
        events += len(lines)
        step += 1
        t += STEP_US
    tail = '\n], "traceName": "synthetic", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1711964646000000000}\n'
    out.write(tail)
    return events, comms, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=64.0, help="trace size in MB (default 64)")
    parser.add_argument("--gzip", action="store_true", help="also import it as .json.gz")
    parser.add_argument("--dir", type=Path, help="where to write the trace (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="commlens-import-bench-", dir=args.dir) as tmp:
        trace = Path(tmp) / "rank0.pt.trace.json"
        with trace.open("w") as fh:
            events, comms, steps = _write_trace(fh, int(args.mb * 1e6))
        size = trace.stat().st_size
        mb = size / 1e6
        print(f"trace: {mb:.0f} MB, {events:,} events, {comms} all-reduces, {steps} steps")
        exe = Path(sys.executable)
        commlens = [str(exe), "-m", "commlens", "import", str(trace)]
        rows = []
        imp = run_child([*commlens, "--out", str(Path(tmp) / "run")])
        rows.append(("commlens import", imp))
        load = run_child([str(exe), "-c", f"import json; json.load(open({str(trace)!r}))"])
        rows.append(("json.load", load))
        if args.gzip:
            gz = trace.with_suffix(".json.gz")
            with trace.open("rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            trace.unlink()
            print(
                f"gzip: {gz.stat().st_size / 1e6:.0f} MB compressed (level 1); MB/s below are of the JSON"
            )
            rows.append(
                (
                    "commlens import .gz",
                    run_child([*commlens[:-1], str(gz), "--out", str(Path(tmp) / "run-gz")]),
                )
            )
        print(
            f"{'reader':<22}{'wall (s)':>10}{'CPU (s)':>10}{'MB/s per core':>15}{'peak RSS (GiB)':>16}"
        )
        for name, usage in rows:
            rate = mb / usage.cpu_s if usage.cpu_s else float("nan")
            print(
                f"{name:<22}{usage.wall_s:>10.2f}{usage.cpu_s:>10.2f}{rate:>15.1f}{usage.peak_rss_gib:>16.3f}"
                + ("" if usage.rc == 0 else f"  FAILED rc={usage.rc}")
            )
        ok = imp.rc == 0 and mb / imp.cpu_s >= 50 and imp.peak_rss_gib <= 1.0
        print(f"target (>= 50 MB/s per core, <= 1 GiB): {'OK' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
