"""Rank program for the netem tests: ``python rankprog.py MODE OUTDIR [ARGS]``.

- ``sleep``: join the group, write ``rank<r>.json`` (pid, interface), sleep.
- ``allreduce BYTES CALLS``: time CALLS all-reduces; rank 0 writes ``result.json``.
- ``groups BYTES``: 4 ranks on 2 nodes; time an all-reduce inside node 0
  (ranks 0, 1) and one across nodes (ranks 0, 2); rank 0 writes ``result.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def _timed(tensor: torch.Tensor, calls: int, group: dist.ProcessGroup | None = None) -> float:
    dist.all_reduce(tensor, group=group)  # warm the connection
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / calls


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "sleep":
        info = {"pid": os.getpid(), "iface": os.environ.get("GLOO_SOCKET_IFNAME")}
        (out / f"rank{rank}.json").write_text(json.dumps(info))
        time.sleep(120)
    elif mode == "allreduce":
        size, calls = int(sys.argv[3]), int(sys.argv[4])
        seconds = _timed(torch.ones(size // 4), calls)
        if rank == 0:
            result = {"seconds": seconds, "iface": os.environ.get("GLOO_SOCKET_IFNAME")}
            (out / "result.json").write_text(json.dumps(result))
    elif mode == "groups":
        size = int(sys.argv[3])
        groups = {
            name: dist.new_group(ranks)
            for name, ranks in (
                ("intra0", [0, 1]),
                ("intra1", [2, 3]),
                ("inter0", [0, 2]),
                ("inter1", [1, 3]),
            )
        }
        tensor = torch.ones(size // 4)
        intra = _timed(tensor, 3, groups["intra0" if rank < 2 else "intra1"])
        dist.barrier()
        inter = _timed(tensor, 3, groups["inter0" if rank % 2 == 0 else "inter1"])
        if rank == 0:
            (out / "result.json").write_text(json.dumps({"intra_s": intra, "inter_s": inter}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
