"""A 2-rank gloo job that profiles itself with torch.profiler (it knows nothing of commlens).

Every communication op runs inside the profiler: a DDP model's construction and
two steps of training, and one of each kind of op. Each rank writes its Chrome
trace into the folder given as the first argument and, given a second, its
Flight Recorder dump (pickle) into that one.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 32))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            loss = model(torch.randn(8, 64)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            t = torch.ones(1000)
            dist.all_reduce(t)
            gathered = torch.empty(1000 * world)
            dist.all_gather_into_tensor(gathered, t)
            part = torch.empty(1000 // world)
            dist.reduce_scatter_tensor(part, t)
            dist.broadcast(torch.arange(64), src=0)
            if rank == 0:
                dist.send(torch.ones(300), dst=1)
            else:
                dist.recv(torch.empty(300), src=0)
            dist.all_to_all_single(torch.empty(16), torch.ones(16))
            dist.barrier()
            prof.step()
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"rank{rank}.pt.trace.json"))
    if len(sys.argv) > 2:  # the Flight Recorder's dump of the same ops
        dump = torch._C._distributed_c10d._dump_fr_trace(True, False, False)
        fr = Path(sys.argv[2])
        fr.mkdir(parents=True, exist_ok=True)
        (fr / f"rank_{rank}").write_bytes(dump)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
