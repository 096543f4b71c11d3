"""A model under torch.compile: the capture's stand-ins run as they are inside compiled
regions (DDP's forward issues its buffer broadcast from C++ there), so every op is
recorded and the recording never stops."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.distributed import run_ranks
from tests.frameworks.observe import profiled_ops, recorded_ops, rows

STEPS = 3


def _compiled_ddp(rank: int, world: int, out: str) -> dict[str, int]:
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile

    warnings.simplefilter("ignore")
    with commlens.capture(out, align_clocks=False):
        dist.init_process_group("gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
            compiled = torch.compile(DDP(model), backend="aot_eager")
            opt = torch.optim.SGD(compiled.parameters(), lr=0.1)
            torch.manual_seed(rank)
            for _ in range(STEPS):
                compiled(torch.randn(4, 16)).square().mean().backward()
                opt.step()
                opt.zero_grad()
        dist.destroy_process_group()
    return profiled_ops(prof)


def test_a_compiled_ddp_model_is_traced_in_full(tmp_path: Path) -> None:
    seen = run_ranks(_compiled_ddp, 2, str(tmp_path), timeout=300)
    run = commlens.load_run(tmp_path)
    for rank in range(2):
        assert run.manifest["ranks"][str(rank)]["status"] == "ok"  # never stopped recording
        assert recorded_ops(tmp_path, rank) == seen[rank]  # against torch.profiler
    buckets = rows(
        tmp_path,
        "select step, module from events where rank = 0 and op = 'all_reduce' "
        "and phase = 'backward' order by step",
    )
    assert [s for s, _ in buckets] == list(range(STEPS))  # one bucket a step
    assert all(m.startswith("_orig_mod.module.") for _, m in buckets)  # a path in the model
