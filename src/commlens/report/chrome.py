"""Chrome trace (Perfetto) export: one process per rank, tracks per capture path.

Each op is one complete event (``ph: "X"``, ``ts``/``dur`` in µs from the
run's first op) with its fields under the PyTorch profiler's argument names
("Collective name", "In msg nelems", ...; conventions §5). Ops that overlap in
time on one capture path (async ops, DDP buckets) go on extra tracks, since
complete events of one track must nest. Steps are async
spans (``ph: "b"``/``"e"``, category ``step``) on each rank. Events stream
from DuckDB in batches, so a large run is never held in memory as JSON. A
selection of ranks keeps their processes only (``otherData.ranks`` names them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from commlens.trace.files import format_ranks
from commlens.trace.reader import RunView

# (api, is_async) -> (tid, thread name)
_THREADS = {
    ("python", False): (0, "main thread (blocking ops)"),
    ("python", True): (1, "async ops"),
    ("batch_p2p", False): (2, "batched p2p"),
    ("batch_p2p", True): (2, "batched p2p"),
    # Issued from C++: DDP's buckets (api ddp_hook in runs recorded by earlier versions).
    ("c10d", False): (3, "DDP gradient buckets"),
    ("c10d", True): (3, "DDP gradient buckets"),
    ("ddp_hook", False): (3, "DDP gradient buckets"),
    ("ddp_hook", True): (3, "DDP gradient buckets"),
    ("functional", False): (4, "functional collectives"),
    ("functional", True): (4, "functional collectives"),
}
_OTHER = (5, "other")

_QUERY = """
SELECT rank, seq, op, api, pg_name, pg_ranks, group_size, role, dtype, count, bytes_in,
       bytes_out, size_bytes, peer, is_async, t_issue_ns, t_end_ns, t_wait_ns, step, phase,
       module
FROM events {where} ORDER BY rank, t_issue_ns, seq
"""


def _thread(api: str, is_async: bool) -> tuple[int, str]:
    return _THREADS.get((api, bool(is_async)), _OTHER)


def _op_event(e: dict[str, Any], t0: int) -> dict[str, Any]:
    item = e["bytes_in"] / e["count"] if e["count"] else 0
    out_nelems = int(e["bytes_out"] / item) if item else 0
    return {
        "name": e["op"],
        "cat": "comm",
        "ph": "X",
        "ts": round((e["t_issue_ns"] - t0) / 1e3, 3),
        "dur": round(max(e["t_end_ns"] - e["t_issue_ns"], 0) / 1e3, 3),
        "pid": e["rank"],
        "tid": _thread(e["api"], e["is_async"])[0],
        "args": {
            "Collective name": e["op"],
            "In msg nelems": e["count"],
            "Out msg nelems": out_nelems,
            "Group size": e["group_size"],
            "dtype": e["dtype"],
            "Process Group Name": e["pg_name"],
            "Process Group Ranks": str(list(e["pg_ranks"] or [])),
            "In msg bytes": e["bytes_in"],
            "Out msg bytes": e["bytes_out"],
            "Msg size S (bytes)": e["size_bytes"],
            "Peer": e["peer"],
            "Async": e["is_async"],
            "Wait (us)": round(e["t_wait_ns"] / 1e3, 3),
            "Role": e["role"],
            "Seq": e["seq"],
            "Step": e["step"],
            "Phase": e["phase"],
            "Module": e["module"],
            "Capture": e["api"],
        },
    }


def _where(ranks: list[int] | None) -> str:
    """The SQL filter that keeps ``ranks`` (all when None)."""
    return "" if ranks is None else f"WHERE rank IN ({', '.join(map(str, [*ranks, -1]))})"


def trace_events(
    run: RunView, batch_rows: int = 65536, ranks: list[int] | None = None
) -> Iterator[dict[str, Any]]:
    """Every trace event of ``run`` (of ``ranks`` only, when given): metadata, steps,
    then ops (rank by rank). Times count from the first op of the whole run, so that
    traces of different selections line up."""
    where = _where(ranks)
    first = run.time_span()  # of the whole run, from the files' statistics where it can
    steps = run.sql(
        f"SELECT rank, step, t_start_ns, t_end_ns FROM steps {where} ORDER BY rank, step"
    )
    starts = [
        t
        for t in (
            first[0] if first else None,
            min(steps.column("t_start_ns").to_pylist(), default=None),
        )
        if t
    ]
    t0 = int(min(starts)) if starts else 0
    processes = run.sql(f"SELECT rank, status FROM ranks {where} ORDER BY rank").to_pylist()
    threads = run.sql(
        f"SELECT DISTINCT rank, api, is_async FROM events {where} ORDER BY ALL"
    ).to_pylist()
    for r in processes:
        label = f"rank {r['rank']}" + (" (missing)" if r["status"] == "missing" else "")
        yield {"name": "process_name", "ph": "M", "pid": r["rank"], "args": {"name": label}}
        yield {
            "name": "process_sort_index",
            "ph": "M",
            "pid": r["rank"],
            "args": {"sort_index": r["rank"]},
        }
    seen: set[tuple[int, int]] = set()
    for t in threads:
        tid, name = _thread(t["api"], t["is_async"])
        if (t["rank"], tid) not in seen:
            seen.add((t["rank"], tid))
            yield _thread_name(t["rank"], tid, name)
    for s in steps.to_pylist():
        span = {
            "name": f"step {s['step']}",
            "cat": "step",
            "pid": s["rank"],
            "tid": 0,
            "id": f"step-{s['rank']}-{s['step']}",
        }
        yield {**span, "ph": "b", "ts": round((s["t_start_ns"] - t0) / 1e3, 3)}
        yield {**span, "ph": "e", "ts": round((s["t_end_ns"] - t0) / 1e3, 3)}
    lanes = _Lanes()
    reader = run.con.sql(_QUERY.format(where=where)).to_arrow_reader(batch_rows)
    for batch in reader:
        for e in batch.to_pylist():
            event = _op_event(e, t0)
            tid, new_name = lanes.place(e["rank"], event["tid"], e["t_issue_ns"], e["t_end_ns"])
            if new_name:
                yield _thread_name(e["rank"], tid, new_name)
            event["tid"] = tid
            yield event


class _Lanes:
    """Extra tracks so that ops overlapping in time (async, buckets, batched p2p)
    never share one: complete events on a track must nest, and these do not."""

    def __init__(self) -> None:
        self.ends: dict[tuple[int, int], list[int]] = {}

    def place(self, rank: int, tid: int, start: int, end: int) -> tuple[int, str]:
        """(track id, name if the track is new) for an op on ``tid`` of ``rank``."""
        ends = self.ends.setdefault((rank, tid), [])
        for lane, last_end in enumerate(ends):
            if start >= last_end:
                ends[lane] = max(end, start)
                return _lane_tid(tid, lane), ""
        ends.append(max(end, start))
        lane = len(ends) - 1
        if lane == 0:
            return tid, ""  # the base track is named with the others up front
        name = next(n for t, n in _THREADS.values() if t == tid) if tid != _OTHER[0] else _OTHER[1]
        return _lane_tid(tid, lane), f"{name} ({lane + 1})"


def _lane_tid(tid: int, lane: int) -> int:
    return tid if lane == 0 else 100 * (tid + 1) + lane


def write_chrome_trace(run: RunView, out: IO[str], ranks: list[int] | None = None) -> int:
    """Write the trace JSON (of ``ranks`` only, when given) to ``out``; returns the
    number of op events."""
    run.check_pages(ranks)  # a rank with damaged pages is left out before anything is written
    out.write('{"displayTimeUnit": "ms", "otherData": ')
    other: dict[str, Any] = {
        "generator": "commlens",
        "run": str(run.path),
        "missing_ranks": run.missing_ranks,
    }
    if ranks is not None:
        other["ranks"] = format_ranks(ranks)
    out.write(json.dumps(other))
    out.write(', "traceEvents": [\n')
    n_ops = 0
    first = True
    for event in trace_events(run, ranks=ranks):
        if not first:
            out.write(",\n")
        first = False
        out.write(json.dumps(event, separators=(",", ":")))
        n_ops += event.get("ph") == "X"
    out.write("\n]}\n")
    return n_ops


def _thread_name(pid: int, tid: int, name: str) -> dict[str, Any]:
    """The metadata event that names a track."""
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
