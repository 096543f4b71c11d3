"""NCCL Inspector logs (synthetic: no public sample exists): ranks, groups, sizes, clocks."""

from __future__ import annotations

import json
from pathlib import Path

from commlens.trace.reader import load_run
from tests.importers.shared import imported

MS = 1000  # µs


def _record(
    comm: str,
    rank: int,
    n: int,
    host: str,
    pid: int,
    coll: str,
    sn: int,
    size: int,
    start_us: int | None,
    dur_us: int,
    dump_us: int,
) -> dict:
    perf: dict = {
        "coll": coll,
        "coll_sn": sn,
        "coll_msg_size_bytes": size,
        "coll_exec_time_us": dur_us,
        "coll_timing_source": "kernel_gpu",
        "coll_algobw_gbs": 1.0,
        "coll_busbw_gbs": 1.0,
    }
    if start_us is not None:
        perf["event_trace_ts"] = {
            "coll_start_ts": start_us - 50,
            "coll_stop_ts": start_us - 45,
            "kernel_events": [
                {
                    "channel_id": 0,
                    "kernel_start_ts": start_us,
                    "kernel_stop_ts": start_us + dur_us,
                    "kernel_record_ts": start_us + dur_us,
                },
                {
                    "channel_id": 1,
                    "kernel_start_ts": start_us + 3,
                    "kernel_stop_ts": start_us + dur_us - 2,
                    "kernel_record_ts": start_us + dur_us,
                },
            ],
        }
    return {
        "header": {"id": comm, "rank": rank, "n_ranks": n, "nnodes": 2},
        "metadata": {
            "inspector_output_format_version": "v4.0",
            "git_rev": "",
            "rec_mechanism": "profiler_plugin",
            "dump_timestamp_us": dump_us,
            "hostname": host,
            "pid": pid,
        },
        "coll_perf": perf,
    }


def write_logs(folder: Path, skew_us: int = 5 * MS) -> dict[tuple[str, int], int]:
    """Four processes on two hosts (host b's clock ``skew_us`` ahead): a world
    communicator (all-reduces of 4 MiB, sampled: sn 1, 2, 3, 5, 8) and one tensor
    communicator per host (all-gathers of a 1 MiB chunk). Returns (host, pid) -> rank."""
    procs = [("node-a", 100), ("node-a", 101), ("node-b", 200), ("node-b", 201)]
    folder.mkdir(parents=True, exist_ok=True)
    t0 = 1_750_000_000_000_000
    for grank, (host, pid) in enumerate(procs):
        shift = skew_us if host == "node-b" else 0
        lines = []
        for sn in (1, 2, 3, 5, 8):
            end = t0 + sn * 10 * MS + 2 * MS  # every member ends together
            start = end - (2 * MS if grank % 2 else 1500)  # arrival differs
            rec = _record(
                "0xworld",
                grank,
                4,
                host,
                pid,
                "AllReduce",
                sn,
                4 << 20,
                start + shift,
                end - start,
                end + shift + 300,
            )
            lines.append(rec)
            if sn == 3:
                lines.append(rec)  # the dump thread wrote the slot again
        comm = f"0xtp-{host}"
        for sn in (1, 2):
            start = t0 + sn * 10 * MS + 5 * MS
            lines.append(
                _record(
                    comm,
                    grank % 2,
                    2,
                    host,
                    pid,
                    "AllGather",
                    sn,
                    1 << 20,
                    start + shift,
                    800,
                    start + shift + 900,
                )
            )
        (folder / f"{host}-pid{pid}.log").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return {p: r for r, p in enumerate(procs)}


def test_inspector_import(tmp_path: Path) -> None:
    src = tmp_path / "nccl-inspector-123"
    write_logs(src)
    out = imported(src, tmp_path / "run")
    run = load_run(out)
    rows = run.events.to_pylist()
    assert sorted({r["rank"] for r in rows}) == [0, 1, 2, 3]
    ar = [r for r in rows if r["op"] == "all_reduce"]
    ag = [r for r in rows if r["op"] == "all_gather"]
    assert len(ar) == 4 * 5  # the repeated record kept once
    assert {r["size_bytes"] for r in ar} == {4 << 20}
    # Inspector's all-gather size is the per-rank chunk; S is the whole output
    assert {r["size_bytes"] for r in ag} == {2 << 20} and {r["bytes_in"] for r in ag} == {1 << 20}
    assert {tuple(r["pg_ranks"]) for r in ag} == {(0, 1), (2, 3)}
    assert {tuple(r["pg_ranks"]) for r in ar} == {(0, 1, 2, 3)}
    # host b's clock moved back by its 5 ms skew: the all-reduces end together again
    by_end: dict[int, list[int]] = {}
    for r in ar:
        by_end.setdefault(r["t_end_ns"], []).append(r["rank"])
    assert all(sorted(v) == [0, 1, 2, 3] for v in by_end.values()), by_end
    manifest = json.loads((out / "run.json").read_text())
    prov = manifest["import"]
    assert prov["clock"]["offsets_ns"]["node-b"] == -5_000_000
    assert prov["clock"]["residual_max_ns"] == 0
    assert any("a sample" in n and "5 of 8" in n for n in prov["notes"])
    assert any("kept once" in n for n in prov["notes"])
    assert prov["source_format"] == "nccl-inspector" and prov["format_version"] == "v4.0"
    # no steps in the source: each rank's whole log is step 0, said so
    assert {r["step"] for r in rows} == {0}
    assert any("taken as step 0" in e for e in prov["estimated"])


def test_inspector_p2p_peers(tmp_path: Path) -> None:
    """p2p_perf records (v4.1+): the peer, a rank of the communicator, becomes a global rank."""
    src = tmp_path / "logs"
    ranks = write_logs(src)
    for (host, pid), peer, kind in ((("node-a", 100), 1, "Send"), (("node-b", 200), 0, "Recv")):
        record = {
            "header": {"id": "0xpp", "rank": 1 - peer, "n_ranks": 2, "nnodes": 2},
            "metadata": {
                "inspector_output_format_version": "v4.1",
                "hostname": host,
                "pid": pid,
                "dump_timestamp_us": 1_750_000_000_900_000,
            },
            "p2p_perf": {
                "p2p": kind,
                "p2p_sn": 1,
                "p2p_peer": peer,
                "p2p_msg_size_bytes": 8192,
                "p2p_exec_time_us": 30.0,
                "p2p_timing_source": "kernel_gpu",
            },
        }
        with (src / f"{host}-pid{pid}.log").open("a") as fh:
            fh.write(json.dumps(record) + "\n")
    rows = load_run(imported(src, tmp_path / "run")).events.to_pylist()
    p2p = sorted(
        (r["rank"], r["op"], r["peer"], r["size_bytes"])
        for r in rows
        if r["op"] in ("send", "recv")
    )
    a, b = ranks[("node-a", 100)], ranks[("node-b", 200)]
    assert p2p == sorted([(a, "send", b, 8192), (b, "recv", a, 8192)])
